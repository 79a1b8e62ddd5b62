"""The generated code's thread pool: persistent pthreads, one pool per loaded object.

Linked into every generated module (LLVM IR below, calling the C library's pthreads; no
Python anywhere in the loop). A loaded artefact starts it once (``guard_pool_start(n)``:
``n - 1`` workers beside the calling thread) and stops it before its code is unmapped
(``guard_pool_stop``). A step split into tasks (guard.compiler.codegen.split) is run by
``guard_pool_run(task, arena, weights, packed, n)``: the caller publishes the task
function and its count under the pool's mutex, wakes the workers, and takes tasks itself
until none are left, then waits for the ones the workers took.

Waiting is bounded spinning, then sleeping. A worker that finds no task polls for the
next step's for :data:`SPIN` rounds of the CPU's spin hint (``pause``; ``isb`` on
AArch64), about 25 us on Zen 5, before it sleeps on a condition variable; the caller
that waits for the workers' last tasks polls the same way before it sleeps. Between the
steps of one inference a worker so stays awake (waking a sleeping thread costs tens of
microseconds on a virtual machine, the length of a small task, and the caller runs the
step's tasks alone meanwhile); between inferences it sleeps after that bound, so an idle
artefact does not hold a CPU of a shared machine. Measured on a 2-vCPU znver5 guest,
2-thread inference against onnxruntime (same process, quiet): inception_block 1.37x ->
0.94x with the split rules of guard.compiler.codegen.split, 1.31x without spinning; a
4x longer spin gained 1-4% more there and lost more where another process held a CPU.
Values polled outside the mutex are read and written atomically.

Tasks write disjoint parts of the output and each is the same code whichever thread runs
it, so the outputs are bit-identical for any thread count. With one thread (no workers
started) ``guard_pool_run`` runs the tasks in order on the caller, without locking.

The mutex and condition variables are 64 zeroed bytes each: glibc's (and musl's) static
initialisers are all-zero, and 64 bytes hold either on x86-64 and AArch64.
"""

from __future__ import annotations

MAX_THREADS = 64
SPIN = 1024  # polls before sleeping: ~25 us of ``pause`` on Zen 5 (25 ns each)
# The spin hint per architecture: its intrinsic and i32 arguments (isb's 15: full system),
# written as IR text here and through llvmlite by guard.compiler.codegen.recurrence.
SPIN_HINT: dict[str, tuple[str, tuple[int, ...]]] = {
    "x86_64": ("llvm.x86.sse2.pause", ()),
    "aarch64": ("llvm.aarch64.isb", (15,)),
}


def pool_ir(triple: str) -> str:
    """The pool's IR for a target triple (its spin hint)."""
    name, args = SPIN_HINT[triple.split("-")[0]]
    decl = f"declare void @{name}({', '.join('i32' for _ in args)})"
    call = f"call void @{name}({', '.join(f'i32 {a}' for a in args)})"
    ir = POOL_IR.replace("@SPIN@", str(SPIN)).replace("@PAUSE@", call)
    return ir.replace("@PAUSE_DECL@", decl)


POOL_IR = r"""
@gp_mutex = internal global [64 x i8] zeroinitializer, align 16
@gp_work = internal global [64 x i8] zeroinitializer, align 16
@gp_done = internal global [64 x i8] zeroinitializer, align 16
@gp_fn = internal global ptr null, align 8
@gp_a = internal global ptr null, align 8
@gp_w = internal global ptr null, align 8
@gp_p = internal global ptr null, align 8
@gp_n = internal global i64 0, align 8
@gp_next = internal global i64 0, align 8
@gp_left = internal global i64 0, align 8
@gp_stop = internal global i32 0, align 4
@gp_threads = internal global i32 1, align 4
@gp_tids = internal global [64 x i64] zeroinitializer, align 8

declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
@PAUSE_DECL@

; Takes and runs tasks while any are untaken; entered and left with the mutex held.
define internal void @gp_drain() nounwind {
entry:
  br label %loop
loop:
  %next = load atomic i64, ptr @gp_next monotonic, align 8
  %n = load atomic i64, ptr @gp_n monotonic, align 8
  %more = icmp slt i64 %next, %n
  br i1 %more, label %take, label %out
take:
  %nn = add i64 %next, 1
  store atomic i64 %nn, ptr @gp_next monotonic, align 8
  %fn = load ptr, ptr @gp_fn
  %a = load ptr, ptr @gp_a
  %w = load ptr, ptr @gp_w
  %p = load ptr, ptr @gp_p
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  call void %fn(i64 %next, ptr %a, ptr %w, ptr %p)
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  %left = load atomic i64, ptr @gp_left monotonic, align 8
  %left2 = sub i64 %left, 1
  store atomic i64 %left2, ptr @gp_left monotonic, align 8
  %last = icmp eq i64 %left2, 0
  br i1 %last, label %signal, label %loop
signal:
  %b = call i32 @pthread_cond_broadcast(ptr @gp_done)
  br label %loop
out:
  ret void
}

; Polls up to SPIN rounds, without the mutex, until a step has untaken tasks or the pool
; stops (%for_work) or until no task of the step is left running (not %for_work).
define internal void @gp_spin(i1 %for_work) nounwind {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i2, %work ], [ %i2, %done ]
  %go = icmp ult i64 %i, @SPIN@
  br i1 %go, label %poll, label %out
poll:
  @PAUSE@
  %i2 = add i64 %i, 1
  br i1 %for_work, label %work, label %done
work:
  %next = load atomic i64, ptr @gp_next monotonic, align 8
  %n = load atomic i64, ptr @gp_n monotonic, align 8
  %stop = load atomic i32, ptr @gp_stop monotonic, align 4
  %more = icmp slt i64 %next, %n
  %stopping = icmp ne i32 %stop, 0
  %seen = or i1 %more, %stopping
  br i1 %seen, label %out, label %loop
done:
  %left = load atomic i64, ptr @gp_left monotonic, align 8
  %finished = icmp eq i64 %left, 0
  br i1 %finished, label %out, label %loop
out:
  ret void
}

define internal ptr @gp_worker(ptr %arg) nounwind {
entry:
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  br label %wait
wait:
  %may_spin = phi i1 [ true, %entry ], [ true, %work ], [ false, %sleep ], [ false, %spun ]
  %stop = load atomic i32, ptr @gp_stop monotonic, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %check
check:
  %next = load atomic i64, ptr @gp_next monotonic, align 8
  %n = load atomic i64, ptr @gp_n monotonic, align 8
  %more = icmp slt i64 %next, %n
  br i1 %more, label %work, label %idle
idle:
  br i1 %may_spin, label %spin, label %sleep
spin:
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  call void @gp_spin(i1 true)
  %l2 = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  br label %spun
spun:
  br label %wait
sleep:
  %c = call i32 @pthread_cond_wait(ptr @gp_work, ptr @gp_mutex)
  br label %wait
work:
  call void @gp_drain()
  br label %wait
exit:
  %u2 = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  ret ptr null
}

; Starts n - 1 workers (n clamped to 1..64) unless started; returns the pool's threads.
define i32 @guard_pool_start(i32 %want) nounwind {
entry:
  %have = load i32, ptr @gp_threads
  %started = icmp sgt i32 %have, 1
  br i1 %started, label %done, label %clamp
clamp:
  %lo = icmp slt i32 %want, 1
  %n1 = select i1 %lo, i32 1, i32 %want
  %hi = icmp sgt i32 %n1, 64
  %n = select i1 %hi, i32 64, i32 %n1
  br label %loop
loop:
  %i = phi i32 [ 1, %clamp ], [ %i2, %made ], [ %i2, %failed ]
  %ok = phi i32 [ 1, %clamp ], [ %ok2, %made ], [ %ok, %failed ]
  %go = icmp slt i32 %i, %n
  br i1 %go, label %create, label %finish
create:
  %slot = getelementptr [64 x i64], ptr @gp_tids, i64 0, i32 %ok
  %rc = call i32 @pthread_create(ptr %slot, ptr null, ptr @gp_worker, ptr null)
  %i2 = add i32 %i, 1
  %good = icmp eq i32 %rc, 0
  br i1 %good, label %made, label %failed
made:
  %ok2 = add i32 %ok, 1
  br label %loop
failed:
  br label %loop
finish:
  store i32 %ok, ptr @gp_threads
  ret i32 %ok
done:
  ret i32 %have
}

; Stops and joins the workers (before the object's code is unmapped).
define void @guard_pool_stop() nounwind {
entry:
  %have = load i32, ptr @gp_threads
  %any = icmp sgt i32 %have, 1
  br i1 %any, label %signal, label %out
signal:
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  store atomic i32 1, ptr @gp_stop monotonic, align 4
  %b = call i32 @pthread_cond_broadcast(ptr @gp_work)
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  br label %loop
loop:
  %i = phi i32 [ 1, %signal ], [ %i2, %join ]
  %go = icmp slt i32 %i, %have
  br i1 %go, label %join, label %reset
join:
  %slot = getelementptr [64 x i64], ptr @gp_tids, i64 0, i32 %i
  %tid = load i64, ptr %slot
  %j = call i32 @pthread_join(i64 %tid, ptr null)
  %i2 = add i32 %i, 1
  br label %loop
reset:
  store atomic i32 0, ptr @gp_stop monotonic, align 4
  store i32 1, ptr @gp_threads
  br label %out
out:
  ret void
}

; Runs task(i, arena, weights, packed) for i in 0..n-1 on the pool; returns when all ran.
define void @guard_pool_run(ptr %fn, ptr %a, ptr %w, ptr %p, i64 %n) nounwind {
entry:
  %t = load i32, ptr @gp_threads
  %serial = icmp sle i32 %t, 1
  br i1 %serial, label %sloop, label %par
sloop:
  %i = phi i64 [ 0, %entry ], [ %i2, %sbody ]
  %go = icmp slt i64 %i, %n
  br i1 %go, label %sbody, label %sdone
sbody:
  call void %fn(i64 %i, ptr %a, ptr %w, ptr %p)
  %i2 = add i64 %i, 1
  br label %sloop
sdone:
  ret void
par:
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  store ptr %fn, ptr @gp_fn
  store ptr %a, ptr @gp_a
  store ptr %w, ptr @gp_w
  store ptr %p, ptr @gp_p
  store atomic i64 %n, ptr @gp_left monotonic, align 8
  store atomic i64 0, ptr @gp_next monotonic, align 8
  store atomic i64 %n, ptr @gp_n release, align 8
  %b = call i32 @pthread_cond_broadcast(ptr @gp_work)
  call void @gp_drain()
  %left0 = load atomic i64, ptr @gp_left monotonic, align 8
  %pending0 = icmp ne i64 %left0, 0
  br i1 %pending0, label %spin, label %finish
spin:
  %u0 = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  call void @gp_spin(i1 false)
  %l0 = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  br label %wait
wait:
  %left = load atomic i64, ptr @gp_left monotonic, align 8
  %pending = icmp ne i64 %left, 0
  br i1 %pending, label %sleep, label %finish
sleep:
  %c = call i32 @pthread_cond_wait(ptr @gp_done, ptr @gp_mutex)
  br label %wait
finish:
  store atomic i64 0, ptr @gp_n monotonic, align 8
  store atomic i64 0, ptr @gp_next monotonic, align 8
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  ret void
}
"""
