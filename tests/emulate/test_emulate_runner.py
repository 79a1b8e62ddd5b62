"""The emulation runner: a real AArch64 object, linked by the cross gcc, run under qemu."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from emulate_fakes import N, emit_object, entry_module, needs_tools, weights

from guard.backends.base import MemoryInfo, PartitionInfo
from guard.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, ModelError
from guard.emulate import (
    EmulatedSession,
    EmulationFailed,
    EntryPoint,
    PartitionServer,
    TensorSlot,
    ToolMissing,
    build_runner,
    needs_emulation,
    require,
)


def _entry(tmp_path: Path, kind: str = "ok") -> EntryPoint:
    obj = emit_object(entry_module(kind), tmp_path / f"{kind}.o")
    weights(tmp_path)
    return EntryPoint(
        arch="aarch64", object_path=obj, main="guard_main", arena_bytes=4 * N,
        weights_path=tmp_path / "weights.bin", packed_path=tmp_path / "packed.bin",
        inputs=(TensorSlot("x", "float32", (1, N)),),
        outputs=(TensorSlot("y", "float32", (1, N)), TensorSlot("s", "float32", ())),
    )  # fmt: skip


def _session(tmp_path: Path, kind: str = "ok", timeout_s: float = 120) -> EmulatedSession:
    return EmulatedSession(
        _entry(tmp_path, kind), what=f"artefact fake-{kind}", timeout_s=timeout_s,
        partitions=lambda: PartitionInfo(1, 3, 0), memory=lambda: MemoryInfo(32, 32, "fake"),
        cache_dir=tmp_path / "cache",
    )  # fmt: skip


def test_aarch64_needs_emulation_on_x86_64_only() -> None:
    import platform

    on_x86 = platform.machine() in ("x86_64", "AMD64")
    assert needs_emulation("aarch64") is on_x86
    assert needs_emulation("x86_64") is not on_x86


@needs_tools
def test_emulated_entry_computes_what_numpy_does(tmp_path: Path) -> None:
    session = _session(tmp_path)
    w, bias = weights(tmp_path)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, N)).astype(np.float32) for _ in range(3)]
    outs = session.run_many([{"x": x} for x in xs])
    assert len(outs) == 3
    for x, (y, s) in zip(xs, outs, strict=True):
        np.testing.assert_allclose(y, x * w + bias, rtol=1e-6)
        assert s.shape == () and np.isclose(s, x.sum(), rtol=1e-5)
    # one sample through run() is the same call
    y0, s0 = session.run({"x": xs[0]})
    np.testing.assert_array_equal(y0, outs[0][0])
    assert session.partitions().count == 1 and session.memory().arena_bytes == 32
    assert session.latency_status == "emulated"
    assert session.latency_reason.startswith("skipped: emulated (qemu-aarch64-static)")


@needs_tools
def test_runner_is_built_once_per_object(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    cache = tmp_path / "cache"
    first = build_runner(entry.object_path, "aarch64", mains=["guard_main"], what="a",
                         cache_dir=cache)  # fmt: skip
    stamp = first.stat().st_mtime_ns
    again = build_runner(entry.object_path, "aarch64", mains=["guard_main"], what="a",
                         cache_dir=cache)  # fmt: skip
    assert again == first and again.stat().st_mtime_ns == stamp
    # a different object is a different runner
    other = emit_object(entry_module("crash"), tmp_path / "other.o")
    assert build_runner(other, "aarch64", mains=["guard_main"], what="a", cache_dir=cache) != first
    # so is another set of entries
    assert build_runner(entry.object_path, "aarch64", parts=["guard_part0"], what="a",
                        cache_dir=cache) != first  # fmt: skip
    assert not [p for p in cache.rglob(".runner.*")]  # no half-written executables


@needs_tools
def test_crash_is_an_error_naming_the_artefact_and_the_signal(tmp_path: Path) -> None:
    session = _session(tmp_path, "crash")
    with pytest.raises(EmulationFailed) as e:
        session.run({"x": np.zeros((1, N), np.float32)})
    msg = str(e.value)
    assert msg.startswith("artefact fake-crash: crashed with SIGSEGV under qemu-aarch64-static")
    assert e.value.exit_code == EXIT_INTERNAL and "\n" not in msg


@needs_tools
def test_hang_is_an_error_after_the_timeout(tmp_path: Path) -> None:
    session = _session(tmp_path, "hang", timeout_s=2)
    with pytest.raises(EmulationFailed, match=r"^artefact fake-hang: hung: no result from "
                       r"qemu-aarch64-static after 2 s"):  # fmt: skip
        session.run({"x": np.zeros((1, N), np.float32)})


@needs_tools
def test_wrong_input_shape_or_name_is_refused(tmp_path: Path) -> None:
    session = _session(tmp_path)
    with pytest.raises(ModelError, match=r"input 'x' has shape \[2, 8\]"):
        session.run({"x": np.zeros((2, N), np.float32)})
    with pytest.raises(ModelError, match=r"missing input\(s\) \['x'\]"):
        session.run({"z": np.zeros((1, N), np.float32)})


@needs_tools
def test_an_object_for_another_arch_does_not_link(tmp_path: Path) -> None:
    obj = emit_object(entry_module("ok", "x86_64-linux-gnu"), tmp_path / "x86.o", features="")
    with pytest.raises(EmulationFailed, match=r"^art: cannot link the aarch64 runner with x86.o"):
        build_runner(obj, "aarch64", mains=["guard_main"], what="art", cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    ("hide", "package"),
    [("qemu-aarch64-static", "qemu-user-static"),
     ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")],
)  # fmt: skip
def test_missing_tool_names_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hide: str, package: str
) -> None:
    # A PATH holding only the other tool (a stub), so exactly one is missing.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("qemu-aarch64-static", "aarch64-linux-gnu-gcc"):
        if tool != hide:
            stub = bin_dir / tool
            stub.write_text("#!/bin/sh\nexit 0\n")
            stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("GUARD_EMULATE_PATH", raising=False)
    with pytest.raises(ToolMissing) as e:
        require("aarch64")
    msg = str(e.value)
    assert msg.startswith(f"{hide} is not installed: install the Debian package {package}")
    assert f"apt-get install -y {package}" in msg and "\n" not in msg
    assert e.value.exit_code == EXIT_BAD_INPUT


def test_missing_static_libc_names_its_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("qemu-aarch64-static", "aarch64-linux-gnu-gcc"):  # gcc prints a bare name
        stub = bin_dir / tool
        stub.write_text("#!/bin/sh\necho libc.a\n")
        stub.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + "/usr/bin")
    with pytest.raises(ToolMissing, match="install the Debian package libc6-dev-arm64-cross"):
        require("aarch64")


@needs_tools
def test_partition_server_runs_entries_over_a_shared_arena(tmp_path: Path) -> None:
    entry = _entry(tmp_path)
    exe = build_runner(entry.object_path, "aarch64", parts=["guard_part0"], what="a",
                       cache_dir=tmp_path / "cache")  # fmt: skip
    arena_file = tmp_path / "arena.bin"
    x = np.arange(N, dtype=np.float32)
    x.tofile(arena_file)
    arena = np.memmap(arena_file, dtype=np.float32, mode="r+", shape=(N,))
    with PartitionServer(exe, "aarch64", arena_file=arena_file, weights=entry.weights_path,
                         packed=entry.packed_path, what="a", timeout_s=60) as server:  # fmt: skip
        server.call("guard_part0")
        np.testing.assert_array_equal(arena, 2 * x)
        arena[:] += 1  # the host's own step between two generated partitions
        server.call("guard_part0")
        np.testing.assert_array_equal(arena, 2 * (2 * x + 1))
        with pytest.raises(EmulationFailed, match=r"runner exited with status 2: .*no partition "
                           r"entry guard_part9"):  # fmt: skip
            server.call("guard_part9")


@needs_tools
def test_partition_server_reports_a_crash(tmp_path: Path) -> None:
    obj = emit_object(entry_module("crash"), tmp_path / "crash.o")
    weights(tmp_path)
    exe = build_runner(obj, "aarch64", parts=["guard_part0"], what="a", cache_dir=tmp_path / "c")
    arena_file = tmp_path / "arena.bin"
    arena_file.write_bytes(bytes(64))
    server = PartitionServer(exe, "aarch64", arena_file=arena_file,
                             weights=tmp_path / "weights.bin", packed=tmp_path / "packed.bin",
                             what="art", timeout_s=60)  # fmt: skip
    with server, pytest.raises(EmulationFailed, match=r"^art \(guard_part0\): crashed with "
                               r"SIGSEGV under qemu-aarch64-static"):  # fmt: skip
        server.call("guard_part0")


def test_emulation_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from guard.core.errors import UsageError
    from guard.emulate.runner import DEFAULT_TIMEOUT_S, emulation_timeout_s

    monkeypatch.delenv("GUARD_EMULATE_TIMEOUT_S", raising=False)
    assert emulation_timeout_s() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv("GUARD_EMULATE_TIMEOUT_S", "42.5")
    assert emulation_timeout_s() == 42.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv("GUARD_EMULATE_TIMEOUT_S", bad)
        with pytest.raises(UsageError, match="GUARD_EMULATE_TIMEOUT_S=.* is not a number"):
            emulation_timeout_s()
