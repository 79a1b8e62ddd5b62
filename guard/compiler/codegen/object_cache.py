"""A cache of compiled objects: a kernel plan built before, for the same target by the
same compiler, is not emitted or compiled again.

``guard fit`` builds the unconstrained plan and every distinct rung's plan to time them,
and a second ladder of the same model builds the same plans again: emitting a module
(Python) and compiling it (LLVM at O3) are most of the command's time. :func:`code_for`
keys a kernel plan by the sha256 of everything the object is a function of:

- the kernel plan whole, pickled: every step's op, attributes, operands (space, offset,
  shape, dtype), aliasing and thread-pool tasks, the entries and the packed size (a
  change of model, pass, memory plan or rung is another plan);
- the target: triple, CPU, features, and the per-target table every heuristic reads
  (with the host's cache sizes);
- the compiler: the sha256 of every source file of guard.compiler (an emitter, the pass
  pipeline, the thread pool's IR: any change is another key), LLVM's and llvmlite's
  versions.

No key is made while a tuning dispatch is active (guard.compiler.tuning.dispatch: its
schedules are not in the plan), so such a build is always compiled. An entry is a folder
``<root>/<key>/`` holding ``kernels.o`` and ``entry.json`` (the key's parts, the kernel
count, what emitting and compiling took, and the object's sha256, checked on every read: a damaged entry is compiled again, never loaded),
written to a temporary folder and renamed into place, so a reader never sees half of
one. ``guard cache`` lists and prunes the entries (part ``codegen``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from guard.compiler.codegen.build import emit_module
from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.compiler.codegen.llvm_target import CodegenTarget
from guard.compiler.codegen.module import Generated, compile_module
from guard.compiler.tuning.dispatch import active
from guard.core.fsutil import sources_sha256

SCHEMA = 1
COMPILER_ROOT = Path(__file__).resolve().parents[1]  # guard/compiler


def compiler_sha256() -> str:
    """sha256 of every source file of guard.compiler."""
    return sources_sha256(COMPILER_ROOT)


def key_parts(target: CodegenTarget) -> dict[str, Any]:
    """Everything but the kernel plan that decides the object."""
    import llvmlite
    import llvmlite.binding as llvm

    return {
        "schema": SCHEMA,
        "triple": target.triple,
        "cpu": target.cpu,
        "features": list(target.features),
        "table": hashlib.sha256(pickle.dumps(target.table)).hexdigest(),
        "compiler": compiler_sha256(),
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(str(v) for v in llvm.llvm_version_info),
    }


def plan_key(kplan: KernelPlan, parts: dict[str, Any]) -> str:
    h = hashlib.sha256(json.dumps(parts, sort_keys=True).encode())
    h.update(b"\0")
    h.update(pickle.dumps(kplan, protocol=4))
    return h.hexdigest()


def lookup(kplan: KernelPlan, target: CodegenTarget, root: Path) -> Generated | None:
    """The kernel plan's Generated when ``root`` holds it (``ir_text`` empty: the cache
    keeps the object, what a run needs; ``compile_s`` what emitting and compiling it took
    when it was stored), else None (and None under a tuning dispatch)."""
    if active() is not None:
        return None
    key = plan_key(kplan, key_parts(target))
    hit = _read(root / key[:40], key)
    return None if hit is None else Generated("", hit[0], hit[2], hit[1])


def code_for(
    kplan: KernelPlan, target: CodegenTarget, root: Path | None, key: str | None = None
) -> Generated:
    """The kernel plan's Generated: from ``root`` when built before (:func:`lookup`), else
    emitted, compiled (guard.compiler.codegen.module) and stored. ``key``: the plan's
    :func:`plan_key` when the caller made it (guard.compiler.fit.parallel: a kernel plan
    unpickled in a worker pickles to other bytes, so its key is the sender's)."""
    if root is None or active() is not None:
        return compile_module(emit_module(kplan, target), target)
    parts = key_parts(target)
    key = key or plan_key(kplan, parts)
    hit = _read(root / key[:40], key)
    if hit is not None:
        return Generated("", hit[0], hit[2], hit[1])
    t0 = time.perf_counter()
    gen = compile_module(emit_module(kplan, target), target)
    _write(root, key, parts, gen, time.perf_counter() - t0)
    return gen


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _read(d: Path, key: str) -> tuple[bytes, int, float] | None:
    try:
        meta = json.loads((d / "entry.json").read_text())
        obj = (d / "kernels.o").read_bytes()
    except (OSError, ValueError):
        return None
    if (
        not isinstance(meta, dict)
        or meta.get("key") != key
        or meta.get("object_sha256") != _sha(obj)
    ):
        return None  # damaged or another key's: compiled again (and rewritten)
    try:
        os.utime(d)  # a hit is a use: pruning by age keeps it
    except OSError:
        pass
    return obj, int(meta["kernels"]), float(meta["build_s"])


def _write(root: Path, key: str, parts: dict[str, Any], gen: Generated, build_s: float) -> None:
    """Store ``gen``'s object under ``key`` (a cache that cannot be written is not an error: the
    next ladder compiles it again)."""
    d = root / key[:40]
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    except OSError:
        return
    try:
        (tmp / "kernels.o").write_bytes(gen.object_code)
        meta = {"key": key, "parts": parts, "object_sha256": _sha(gen.object_code),
                "kernels": gen.kernels, "build_s": float(build_s)}  # fmt: skip
        (tmp / "entry.json").write_text(json.dumps(meta, sort_keys=True) + "\n")
        if d.exists():  # a damaged entry: replaced
            shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    except OSError:  # another process wrote it first, or the disk is full
        shutil.rmtree(tmp, ignore_errors=True)
