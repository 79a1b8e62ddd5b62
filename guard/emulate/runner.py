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
import select
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from guard.core.errors import InternalError, ModelError, UsageError
from guard.core.isolate import signal_name
from guard.emulate.tools import compiler_identity, require

RUNNER_SOURCE = Path(__file__).with_name("runner.c")
# Per emulator start. Emulation is slow: resnet50 took ~3 minutes here (shared 2-core
# machine), so the default leaves room for a large model on a busy CI runner and still ends
# a hang; GUARD_EMULATE_TIMEOUT_S overrides it.
DEFAULT_TIMEOUT_S = 1800.0
_SYMBOL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class EmulationFailed(InternalError):
    """The emulated artefact crashed, hung or could not be linked (exit 3: guard's own code)."""


def emulation_timeout_s() -> float:
    """$GUARD_EMULATE_TIMEOUT_S when set (seconds, > 0), else DEFAULT_TIMEOUT_S."""
    raw = os.environ.get("GUARD_EMULATE_TIMEOUT_S")
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise UsageError(f"GUARD_EMULATE_TIMEOUT_S={raw!r} is not a number of seconds > 0",
                         hint="Unset it, or give e.g. GUARD_EMULATE_TIMEOUT_S=3600.")  # fmt: skip
    return value


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


def _entries_c(mains: Sequence[str], parts: Sequence[str]) -> str:
    """The runner's table of the artefact's entry symbols (runner.c declares the types)."""
    lines = ["struct main_entry { const char *name; void *fn; };",
             "struct part_entry { const char *name; void *fn; };"]  # fmt: skip
    lines += [f"extern void {m}(void);" for m in (*mains, *parts)]
    lines.append("const struct main_entry guard_runner_mains[] = {")
    lines += [f'    {{"{m}", (void *){m}}},' for m in mains]
    lines.append("    {0, 0}};")
    lines.append("const struct part_entry guard_runner_parts[] = {")
    lines += [f'    {{"{p}", (void *){p}}},' for p in parts]
    lines.append("    {0, 0}};")
    return "\n".join(lines) + "\n"


def build_runner(
    object_path: Path,
    arch: str,
    *,
    mains: Sequence[str] = (),
    parts: Sequence[str] = (),
    what: str,
    cache_dir: Path | None = None,
    emulated: bool = True,
) -> Path:
    """The static runner executable for ``object_path`` (built once, then reused).

    ``mains`` and ``parts`` are the object's entry symbols of each kind; ``what`` names
    the artefact in messages; ``emulated=False`` builds it to run natively (no emulator
    needed: the hardware-counter engine).
    """
    for symbol in (*mains, *parts):
        if not _SYMBOL_RE.match(symbol):
            raise ModelError(f"entry symbol {symbol!r} is not a C identifier", where=what)
    if not mains and not parts:
        raise ModelError("the artefact names no entry function to run", where=what)
    tc, _, compiler = require(arch, emulated=emulated)
    table = _entries_c(mains, parts)
    key = hashlib.sha256()
    for part in (
        RUNNER_SOURCE.read_bytes(),
        table.encode(),
        _sha256_file(object_path).encode(),
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
    with tempfile.TemporaryDirectory(prefix="guard-runner-") as src_dir:
        entries = Path(src_dir) / "entries.c"
        entries.write_text(table)
        cmd = [compiler, "-static", "-O2", "-o", str(tmp), str(RUNNER_SOURCE), str(entries),
               str(object_path), "-lm"]  # fmt: skip
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
            raise EmulationFailed(
                f"linking the {tc.arch} runner took over 300 s", where=what
            ) from None
        finally:
            tmp.unlink(missing_ok=True)
    return exe


def _check_exit(code: int | None, stderr: str, emulator: str, what: str) -> None:
    """Raise EmulationFailed for a runner that was killed by a signal or failed."""
    if code == 0 or code is None:
        return
    tail = " ".join(stderr.split())
    if code < 0 or code >= 128:
        num = -code if code < 0 else code - 128
        raise EmulationFailed(
            f"crashed with {signal_name(num)} under {emulator}"
            + (f" ({tail[-200:]})" if tail else ""),
            where=what,
            hint="The generated code is at fault: this is a guard bug.",
        )
    raise EmulationFailed(f"runner exited with status {code}: {tail[-300:]}", where=what)


def _env(threads: int) -> dict[str, str]:
    """The runner's environment: GUARD_THREADS starts the generated code's pool."""
    return {**os.environ, "GUARD_THREADS": str(max(1, int(threads)))}


def call_args(
    runner: Path,
    tmp: Path,
    *,
    symbol: str,
    arena_bytes: int,
    weights: Path,
    packed: Path,
    inputs: Sequence[Sequence[bytes]],
    output_nbytes: Sequence[int],
) -> tuple[list[str], list[Path]]:
    """The runner's ``call`` arguments for ``inputs``, written to files in ``tmp``.

    Returns (argv without the emulator, the output files the runner will write).
    """
    n_in = len(inputs[0])
    in_files = []
    for i in range(n_in):
        p = tmp / f"in{i}.bin"
        with p.open("wb") as f:
            for sample in inputs:
                f.write(sample[i])
        in_files.append(str(p))
    out_files = [tmp / f"out{k}.bin" for k in range(len(output_nbytes))]
    args = [str(runner), "call", symbol, str(arena_bytes), str(weights), str(packed),
            str(len(inputs)), str(n_in), *in_files, str(len(out_files)),
            *(f"{p}:{n}" for p, n in zip(out_files, output_nbytes, strict=True))]  # fmt: skip
    return args, out_files


def run_main(
    runner: Path,
    arch: str,
    *,
    symbol: str,
    arena_bytes: int,
    weights: Path,
    packed: Path,
    inputs: Sequence[Sequence[bytes]],
    output_nbytes: Sequence[int],
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int = 1,
) -> list[list[bytes]]:
    """Run the entry once per sample under the emulator; outputs[sample][k] as bytes.

    ``inputs[sample][i]`` is input i of one sample (every sample the same sizes).
    """
    if not inputs:
        return []
    tc, emulator, _ = require(arch)
    count = len(inputs)
    with tempfile.TemporaryDirectory(prefix="guard-emulate-") as tmp_name:
        args, out_files = call_args(
            runner, Path(tmp_name), symbol=symbol, arena_bytes=arena_bytes, weights=weights,
            packed=packed, inputs=inputs, output_nbytes=output_nbytes,
        )  # fmt: skip
        argv = [emulator, "-cpu", "max", *args]
        try:
            proc = subprocess.run(
                argv, capture_output=True, timeout=timeout_s, check=False, env=_env(threads)
            )
        except subprocess.TimeoutExpired:
            raise EmulationFailed(
                f"hung: no result from {tc.emulator} after {timeout_s:g} s ({count} sample(s))",
                where=what,
            ) from None
        _check_exit(proc.returncode, proc.stderr.decode(errors="replace"), tc.emulator, what)
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


class PartitionServer:
    """One emulated runner process serving partition calls over a shared arena file.

    The host maps the same arena file, writes the inputs and runs the partitions that are
    not generated code itself; ``call(symbol)`` runs one generated partition in the
    emulated process and returns when it is done (or raises on a crash or a hang).
    """

    def __init__(
        self,
        runner: Path,
        arch: str,
        *,
        arena_file: Path,
        weights: Path,
        packed: Path,
        what: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        threads: int = 1,
    ) -> None:
        tc, emulator, _ = require(arch)
        self.emulator, self.what, self.timeout_s = tc.emulator, what, timeout_s
        self._stderr = tempfile.TemporaryFile()
        argv = [emulator, "-cpu", "max", str(runner), "serve", str(arena_file), str(weights),
                str(packed)]  # fmt: skip
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=_env(threads),
        )  # fmt: skip

    def _stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def call(self, symbol: str) -> None:
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(symbol.encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the process is gone: its exit status says why, below
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        if not ready:
            self.close()
            raise EmulationFailed(
                f"hung: partition {symbol} gave no result from {self.emulator} after "
                f"{self.timeout_s:g} s",
                where=self.what,
            )
        line = proc.stdout.readline().decode(errors="replace").strip()
        if line != f"ok {symbol}":
            code = proc.wait(timeout=30)
            _check_exit(code, self._stderr_text(), self.emulator, f"{self.what} ({symbol})")
            raise EmulationFailed(f"runner answered {line!r} to {symbol}", where=self.what)

    def close(self) -> None:
        proc = self._proc
        if proc.poll() is None:
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        self._stderr.close()

    def __enter__(self) -> PartitionServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
