"""The generated code's thread pool: persistent pthreads, one pool per loaded object.

Linked into every generated module (LLVM IR below, calling the C library's pthreads; no
Python anywhere in the loop). A loaded artefact starts it once (``guard_pool_start(n)``:
``n - 1`` workers beside the calling thread, worker ``r`` for ``r`` in 1..n-1, the caller
0) and stops it before its code is unmapped (``guard_pool_stop``). A step split into tasks
(guard.compiler.codegen.split) is run by ``guard_pool_run(task, arena, weights, packed,
n)`` with no lock on its path: the caller stores the task function and the step's pointers,
the count of unfinished tasks and, for each thread ``r``, a claim word (its run of tasks
``[n r / T, n (r + 1) / T)`` of ``T`` threads: ``end << 32 | next``), then bumps the step
counter. Each thread claims tasks with one atomic fetch-add on a claim word, its own run's
first, then the other threads' runs (a thread held up elsewhere loses its tasks to the
others); a fetch-add that finds ``next >= end`` claims nothing. Each thread subtracts the
tasks it ran from the unfinished count once; the caller returns when it reaches zero. A
claim succeeds only while the step has an unfinished task, so the caller cannot publish the
next step meanwhile: the task function read after a claim is that step's.

The runs matter as much as the claims' cost: on a 2-vCPU AMD EPYC guest (znver4) a cache
line written by the other core takes ~200 ns to read (400 ns a round trip), and a serial
relayout after a split step ran 2-5x slower at 2 threads than at 1, reading the half the
worker wrote. With the runs, task ``i`` of consecutive steps split alike (bands of rows,
runs of channels) stays on the same thread; the mutex-guarded pool before dealt the tasks
out as threads came for them. A chain of 60 depthwise convolutions of ~9 us, two tasks
each, took 0.53 ms a run at 2 threads with that pool (as at 1) and 0.34 ms with this one.

Waiting is bounded spinning, then sleeping. A worker that finds no new step polls the step
counter (a load; no lock, no write) for :data:`SPIN` rounds of the CPU's spin hint
(``pause``; ``isb`` on AArch64), about 25 us on Zen 4 and 5, before it sleeps on a
condition variable; the caller that waits for the workers' last tasks polls the same way
before it sleeps. Between the steps of one inference a worker so stays awake (waking a
sleeping thread costs tens of microseconds on a virtual machine, the length of a small
task); between inferences it sleeps after that bound, so an idle artefact does not hold a
CPU of a shared machine (on a 2-vCPU znver5 guest a 4x longer spin gained 1-4% on
inception_block at 2 threads and lost more where another process held a CPU). Sleeping
and waking take the mutex: a worker counts itself in ``gp_sleepers`` and checks the step
counter again before it waits, the caller bumps the counter and then reads
``gp_sleepers`` (both sequentially consistent, so one of the two sees the other) and
broadcasts only if a worker sleeps; the caller's sleep on the last tasks pairs with
``gp_waiting`` the same way. Claims acquire and the caller's stores release, which
AArch64's weak ordering needs.

Tasks write disjoint parts of the output and each is the same code whichever thread runs
it, so the outputs are bit-identical for any thread count. With one thread (no workers
started) ``guard_pool_run`` runs the tasks in order on the caller, without atomics.

The mutex and condition variables are 64 zeroed bytes each: glibc's (and musl's) static
initialisers are all-zero, and 64 bytes hold either on x86-64 and AArch64.
"""

from __future__ import annotations

MAX_THREADS = 64
SPIN = 1024  # polls before sleeping: ~25 us of ``pause`` on Zen 4 and 5 (26 ns each)
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
@gp_claims = internal global [64 x [8 x i64]] zeroinitializer, align 64
@gp_epoch = internal global [8 x i64] zeroinitializer, align 64
@gp_left = internal global [8 x i64] zeroinitializer, align 64
@gp_sleepers = internal global i32 0, align 4
@gp_waiting = internal global i32 0, align 4
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

; Whether a claim word (end << 32 | next) has an untaken task.
define internal i1 @gp_open(i64 %v) nounwind alwaysinline {
entry:
  %i = and i64 %v, 4294967295
  %n = lshr i64 %v, 32
  %more = icmp ult i64 %i, %n
  ret i1 %more
}

; Claims (one fetch-add each) and runs tasks of the published step until none is left,
; thread r's own run of them first, then the other threads' runs in turn; returns how many
; it ran. A claim that lands on a taken-out word claims nothing.
define internal i64 @gp_drain(i64 %r) nounwind {
entry:
  %t32 = load i32, ptr @gp_threads
  %t = zext i32 %t32 to i64
  br label %outer
outer:
  %s = phi i64 [ 0, %entry ], [ %s2, %next ]
  %ran = phi i64 [ 0, %entry ], [ %ran2, %next ]
  %ranges = icmp ult i64 %s, %t
  br i1 %ranges, label %pick, label %out
pick:
  %j0 = add i64 %r, %s
  %wrap = icmp uge i64 %j0, %t
  %j1 = sub i64 %j0, %t
  %j = select i1 %wrap, i64 %j1, i64 %j0
  %slot = getelementptr [64 x [8 x i64]], ptr @gp_claims, i64 0, i64 %j, i64 0
  br label %inner
inner:
  %ran2 = phi i64 [ %ran, %pick ], [ %ran3, %take ]
  %v = atomicrmw add ptr %slot, i64 1 acquire
  %more = call i1 @gp_open(i64 %v)
  br i1 %more, label %take, label %next
take:
  %i = and i64 %v, 4294967295
  %fn = load ptr, ptr @gp_fn
  %a = load ptr, ptr @gp_a
  %w = load ptr, ptr @gp_w
  %p = load ptr, ptr @gp_p
  call void %fn(i64 %i, ptr %a, ptr %w, ptr %p)
  %ran3 = add i64 %ran2, 1
  br label %inner
next:
  %s2 = add i64 %s, 1
  br label %outer
out:
  ret i64 %ran
}

; Broadcasts `cond` (under the mutex) if the flag or count at `flag` is not zero.
define internal void @gp_wake(ptr %flag, ptr %cond) nounwind {
entry:
  %v = load atomic i32, ptr %flag seq_cst, align 4
  %any = icmp ne i32 %v, 0
  br i1 %any, label %wake, label %out
wake:
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  %b = call i32 @pthread_cond_broadcast(ptr %cond)
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  br label %out
out:
  ret void
}

; Counts `ran` finished tasks off the step; wakes the caller if it sleeps for the last.
define internal void @gp_finish(i64 %ran) nounwind {
entry:
  %old = atomicrmw sub ptr @gp_left, i64 %ran seq_cst
  %last = icmp eq i64 %old, %ran
  br i1 %last, label %wake, label %out
wake:
  call void @gp_wake(ptr @gp_waiting, ptr @gp_done)
  br label %out
out:
  ret void
}

; Worker r polls the step counter (no lock, no write) for SPIN rounds after its last
; step, then sleeps on gp_work, counted in gp_sleepers, until a step is published or the
; pool stops.
define internal ptr @gp_worker(ptr %arg) nounwind {
entry:
  %r = ptrtoint ptr %arg to i64
  br label %poll
poll:
  %k = phi i64 [ 0, %entry ], [ %k2, %pause ], [ 0, %again ]
  %seen = phi i64 [ -1, %entry ], [ %seen, %pause ], [ %seen2, %again ]
  %stop = load atomic i32, ptr @gp_stop monotonic, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %look
look:
  %e = load atomic i64, ptr @gp_epoch monotonic, align 64
  %fresh = icmp ne i64 %e, %seen
  br i1 %fresh, label %work, label %idle
idle:
  %go = icmp ult i64 %k, @SPIN@
  br i1 %go, label %pause, label %sleep
pause:
  @PAUSE@
  %k2 = add i64 %k, 1
  br label %poll
work:
  %ran = call i64 @gp_drain(i64 %r)
  %any = icmp ne i64 %ran, 0
  br i1 %any, label %finish, label %again
finish:
  call void @gp_finish(i64 %ran)
  br label %again
again:
  %seen2 = phi i64 [ %e, %work ], [ %e, %finish ], [ %seen, %woke ]
  br label %poll
sleep:
  %l = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  %s = atomicrmw add ptr @gp_sleepers, i32 1 seq_cst
  br label %check
check:
  %stop2 = load atomic i32, ptr @gp_stop seq_cst, align 4
  %e2 = load atomic i64, ptr @gp_epoch seq_cst, align 64
  %fresh2 = icmp ne i64 %e2, %seen
  %stopping2 = icmp ne i32 %stop2, 0
  %up = or i1 %fresh2, %stopping2
  br i1 %up, label %woke, label %wait
wait:
  %c = call i32 @pthread_cond_wait(ptr @gp_work, ptr @gp_mutex)
  br label %check
woke:
  %s2 = atomicrmw sub ptr @gp_sleepers, i32 1 seq_cst
  %u = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  br label %again
exit:
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
  %id = zext i32 %ok to i64
  %arg = inttoptr i64 %id to ptr
  %rc = call i32 @pthread_create(ptr %slot, ptr null, ptr @gp_worker, ptr %arg)
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
  store atomic i32 1, ptr @gp_stop seq_cst, align 4
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
  store atomic i32 0, ptr @gp_stop seq_cst, align 4
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
  store ptr %fn, ptr @gp_fn
  store ptr %a, ptr @gp_a
  store ptr %w, ptr @gp_w
  store ptr %p, ptr @gp_p
  store atomic i64 %n, ptr @gp_left monotonic, align 64
  %t64 = zext i32 %t to i64
  br label %publish
publish:
  %r = phi i64 [ 0, %par ], [ %r2, %publish ]
  %r2 = add i64 %r, 1
  %nr = mul i64 %n, %r
  %start = udiv i64 %nr, %t64
  %nr2 = mul i64 %n, %r2
  %end = udiv i64 %nr2, %t64
  %hi = shl i64 %end, 32
  %word = or i64 %hi, %start
  %slot = getelementptr [64 x [8 x i64]], ptr @gp_claims, i64 0, i64 %r, i64 0
  store atomic i64 %word, ptr %slot release, align 64
  %more = icmp ult i64 %r2, %t64
  br i1 %more, label %publish, label %announce
announce:
  %e = atomicrmw add ptr @gp_epoch, i64 1 seq_cst
  call void @gp_wake(ptr @gp_sleepers, ptr @gp_work)
  %ran = call i64 @gp_drain(i64 0)
  %old = atomicrmw sub ptr @gp_left, i64 %ran seq_cst
  %all = icmp eq i64 %old, %ran
  br i1 %all, label %out, label %spin
spin:
  %k = phi i64 [ 0, %announce ], [ %k2, %poll ]
  @PAUSE@
  %left = load atomic i64, ptr @gp_left acquire, align 64
  %none = icmp eq i64 %left, 0
  br i1 %none, label %out, label %poll
poll:
  %k2 = add i64 %k, 1
  %go2 = icmp ult i64 %k2, @SPIN@
  br i1 %go2, label %spin, label %sleep
sleep:
  %l2 = call i32 @pthread_mutex_lock(ptr @gp_mutex)
  store atomic i32 1, ptr @gp_waiting seq_cst, align 4
  br label %check
check:
  %left2 = load atomic i64, ptr @gp_left seq_cst, align 64
  %none2 = icmp eq i64 %left2, 0
  br i1 %none2, label %woke, label %wait
wait:
  %c = call i32 @pthread_cond_wait(ptr @gp_done, ptr @gp_mutex)
  br label %check
woke:
  store atomic i32 0, ptr @gp_waiting seq_cst, align 4
  %u2 = call i32 @pthread_mutex_unlock(ptr @gp_mutex)
  br label %out
out:
  ret void
}
"""
