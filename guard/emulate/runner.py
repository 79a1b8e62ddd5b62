"""Build the static runner for one artefact object, and run it under the emulator.

The runner (``runner.c`` beside this file) is linked with the artefact's object file by
the cross compiler (``-static``: the emulator then needs no target sysroot) and cached by
the hash of everything that goes into it: the C source, the object, the entry symbol and
the compiler's version. ``run_entry`` writes the inputs to files, starts the emulator once
for any number of samples, and reads the outputs back. A generated-code crash comes back
as the signal that killed the emulated process, a hang as the timeout; both raise
``EmulationFailed`` naming the artefact, so the result is an ``error`` and the other
results of the run go on.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from guard.emulate.tools import compiler_identity, require
from guard.errors import InternalError, ModelError

RUNNER_SOURCE = Path(__file__).with_name("runner.c")
DEFAULT_TIMEOUT_S = 900.0  # per emulator start; an emulated resnet50 takes seconds, not minutes
_SYMBOL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EmulationFailed(InternalError):
    """The emulated artefact crashed, hung or could not be linked (exit 3: guard's own code)."""


def cache_root() -> Path:
    """``$GUARD_CACHE/emulate`` if GUARD_CACHE is set, else ``~/.cache/guard/emulate``."""
    root = os.environ.get("GUARD_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "guard") / "emulate"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_runner(
    object_path: Path, symbol: str, arch: str, *, what: str, cache_dir: Path | None = None
) -> Path:
    """The static runner executable for ``object_path`` (built once, then reused).

    ``what`` names the artefact in messages.
    """
    if not _SYMBOL_RE.match(symbol):
        raise ModelError(f"entry symbol {symbol!r} is not a C identifier", where=what)
    tc, _, compiler = require(arch)
    key = hashlib.sha256()
    for part in (
        RUNNER_SOURCE.read_bytes(),
        _sha256_file(object_path).encode(),
        symbol.encode(),
        compiler_identity(compiler).encode(),
        arch.encode(),
    ):
        key.update(part + b"\0")
    out_dir = (cache_dir or cache_root()) / key.hexdigest()[:32]
    exe = out_dir / "runner"
    if exe.is_file():
        return exe
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".runner.", dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    cmd = [compiler, "-static", "-O2", f"-DGUARD_ENTRY={symbol}", "-o", str(tmp),
           str(RUNNER_SOURCE), str(object_path), "-lm"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            detail = " ".join(proc.stderr.split())[-400:]
            raise EmulationFailed(
                f"cannot link the {tc.arch} runner with {object_path.name}: {detail}",
                where=what,
                hint="Rebuild the artefact; if it persists, this is a guard bug.",
            )
        os.replace(tmp, exe)  # concurrent builders write the same bytes: last one wins
    except subprocess.TimeoutExpired:
        raise EmulationFailed(f"linking the {tc.arch} runner took over 300 s", where=what) from None
    finally:
        tmp.unlink(missing_ok=True)
    return exe


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_entry(
    runner: Path,
    arch: str,
    *,
    arena_bytes: int,
    weights: Path,
    inputs: Sequence[Sequence[bytes]],
    output_nbytes: Sequence[int],
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[list[bytes]]:
    """Run the entry once per sample under the emulator; outputs[sample][k] as bytes.

    ``inputs[sample][i]`` is input i of one sample (every sample the same sizes).
    """
    if not inputs:
        return []
    tc, emulator, _ = require(arch)
    count = len(inputs)
    n_in = len(inputs[0])
    with tempfile.TemporaryDirectory(prefix="guard-emulate-") as tmp_name:
        tmp = Path(tmp_name)
        in_files = []
        for i in range(n_in):
            p = tmp / f"in{i}.bin"
            with p.open("wb") as f:
                for sample in inputs:
                    f.write(sample[i])
            in_files.append(str(p))
        out_files = [tmp / f"out{k}.bin" for k in range(len(output_nbytes))]
        argv = [emulator, "-cpu", "max", str(runner), str(arena_bytes), str(weights),
                str(count), str(n_in), *in_files, str(len(out_files)),
                *(f"{p}:{n}" for p, n in zip(out_files, output_nbytes, strict=True))]  # fmt: skip
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise EmulationFailed(
                f"hung: no result from {tc.emulator} after {timeout_s:g} s ({count} sample(s))",
                where=what,
            ) from None
        stderr = " ".join(proc.stderr.decode(errors="replace").split())
        if proc.returncode < 0 or proc.returncode >= 128:
            num = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
            raise EmulationFailed(
                f"crashed with {_signal_name(num)} under {tc.emulator}"
                + (f" ({stderr[-200:]})" if stderr else ""),
                where=what,
                hint="The generated code is at fault: this is a guard bug.",
            )
        if proc.returncode != 0:
            raise EmulationFailed(
                f"runner exited with status {proc.returncode}: {stderr[-300:]}", where=what
            )
        outs: list[list[bytes]] = [[] for _ in range(count)]
        for p, n in zip(out_files, output_nbytes, strict=True):
            data = p.read_bytes()
            if len(data) != n * count:
                raise EmulationFailed(
                    f"runner wrote {len(data)} bytes to output {p.name}, expected {n * count}",
                    where=what,
                )
            for s in range(count):
                outs[s].append(data[s * n : (s + 1) * n])
        return outs
