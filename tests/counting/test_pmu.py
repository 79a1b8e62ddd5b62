"""The hardware-counter engine: the counter's mechanics, the engine's choice, null bytes.

These VMs expose no PMU (a hardware event fails with ENOENT), so the counter's open,
reset, enable, disable and read are driven with a software event the kernel counts here:
user-mode page faults, exactly one per fresh page touched. The same code counts
``instructions:u`` where a PMU exists; the event is a parameter.
"""

from __future__ import annotations

import json
import mmap
import shutil
import subprocess
from pathlib import Path

import pytest

from guard.counting import count as counted_mod
from guard.counting.child import count_calls
from guard.counting.count import CountedConfig, choose_engine
from guard.counting.emulator import CountingFailed
from guard.counting.pmu import (
    BYTES_NOTE,
    PAGE_FAULTS,
    PERF_TYPE_SOFTWARE,
    Counter,
    Event,
    PmuEngine,
    read_counts,
    run_native,
)
from guard.emulate.runner import build_runner, call_args
from guard.emulate.tools import TOOLCHAINS, host_arch

PAGE = mmap.PAGESIZE
TASK_CLOCK = Event(PERF_TYPE_SOFTWARE, 1, "task-clock:u")  # user time in ns: never 0
NATIVE_CC = TOOLCHAINS.get(host_arch(), TOOLCHAINS["x86_64"]).compiler
needs_cc = pytest.mark.skipif(
    shutil.which(NATIVE_CC) is None, reason=f"{NATIVE_CC} not installed (apt-get install -y gcc)"
)


def _software_engine(event: Event = PAGE_FAULTS) -> PmuEngine:
    return PmuEngine(host_arch(), "testcpu", "0" * 16, "test model", "test kernel", event)


def test_the_counter_counts_only_between_start_and_stop(tmp_path: Path):
    """Each call touches its own fresh pages (50, 70, 90): each line is that call's page
    faults, not the ones before or between the calls (the interpreter around the call may
    add a fault of its own: its frames and objects live in memory too)."""
    sizes = (50, 70, 90)
    maps = [mmap.mmap(-1, n * PAGE) for n in sizes]
    for m in maps:
        m.madvise(mmap.MADV_NOHUGEPAGE)
    todo = iter(zip(maps, sizes, strict=True))

    def touch() -> None:
        m, n = next(todo)
        for i in range(n):
            m[i * PAGE] = 1

    junk = mmap.mmap(-1, 64 * PAGE)
    for i in range(64):  # faults before the counter starts: never counted
        junk[i * PAGE] = 1
    counter = Counter(PAGE_FAULTS)
    out = tmp_path / "counts.txt"
    count_calls(touch, 3, counter, out)
    counter.close()
    got = [r.instructions for r in read_counts(out)]
    assert all(n <= g <= n + 2 for n, g in zip(sizes, got, strict=True)), got
    assert all(r.bytes_loaded is None and r.loads is None for r in read_counts(out))


def test_a_count_the_counter_did_not_see_whole_is_refused(tmp_path: Path):
    out = tmp_path / "counts.txt"
    out.write_text("pmu 1000 500 500\npmu 900 1000 600\n")
    with pytest.raises(CountingFailed, match="ran 600 of the 1000 ns"):
        read_counts(out)


# A main entry (runner.c's signature) that maps and touches as many fresh pages as its
# first input says: the runner's counter must see exactly that many per counted call.
TOUCH_C = r"""
#include <stdint.h>
#include <sys/mman.h>
void guard_touch_main(void *arena, const void *w, const void *p, const void *const *in,
                      void *const *out) {
    int32_t n = *(const int32_t *)in[0];
    volatile char *m = mmap(0, (size_t)n * 4096, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise((void *)m, (size_t)n * 4096, MADV_NOHUGEPAGE);
    for (int32_t i = 0; i < n; i++) m[(size_t)i * 4096] = 1;
    munmap((void *)m, (size_t)n * 4096);
    *(int32_t *)out[0] = n;
}
"""


@needs_cc
def test_the_static_runner_counts_each_inference_after_warm_up(tmp_path: Path):
    """runner.c natively, with the counter on: the warm-up call (5 pages) is not counted,
    each later call is one line with exactly its own pages (7, 11, 13)."""
    src, obj = tmp_path / "touch.c", tmp_path / "touch.o"
    src.write_text(TOUCH_C)
    subprocess.run([NATIVE_CC, "-O1", "-c", "-o", str(obj), str(src)], check=True, timeout=120)
    runner = build_runner(obj, host_arch(), mains=["guard_touch_main"], what="touch",
                          cache_dir=tmp_path / "cache", emulated=False)  # fmt: skip
    samples = [[n.to_bytes(4, "little")] for n in (5, 7, 11, 13)]
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"")
    args, outs = call_args(runner, tmp_path, symbol="guard_touch_main", arena_bytes=64,
                           weights=weights, packed=weights, inputs=samples,
                           output_nbytes=[4])  # fmt: skip
    env = {"GUARD_THREADS": "1", "GUARD_COUNT_FROM": "1", "PATH": "/usr/bin:/bin"}
    regions = run_native(_software_engine(), args, timeout_s=120, env=env,
                         out=tmp_path / "counts.txt")  # fmt: skip
    assert [r.instructions for r in regions] == [7, 11, 13]
    assert outs[0].read_bytes() == b"".join(s[0] for s in samples)  # every call ran


@needs_cc
def test_the_runner_says_when_the_counter_cannot_be_opened(tmp_path: Path):
    """A counter the kernel refuses (an event type that does not exist): exit 3 naming
    perf_event_open, a counted failure, not a result of zeros."""
    src, obj = tmp_path / "touch.c", tmp_path / "touch.o"
    src.write_text(TOUCH_C)
    subprocess.run([NATIVE_CC, "-O1", "-c", "-o", str(obj), str(src)], check=True, timeout=120)
    runner = build_runner(obj, host_arch(), mains=["guard_touch_main"], what="touch",
                          cache_dir=tmp_path / "cache", emulated=False)  # fmt: skip
    args, _ = call_args(runner, tmp_path, symbol="guard_touch_main", arena_bytes=64,
                        weights=src, packed=src, inputs=[[b"\1\0\0\0"]],
                        output_nbytes=[4])  # fmt: skip
    bogus = _software_engine(Event(99, 0, "bogus"))
    with pytest.raises(CountingFailed, match="exit status 3.*perf_event_open"):
        run_native(bogus, args, timeout_s=120, env={"GUARD_COUNT_FROM": "0"},
                   out=tmp_path / "counts.txt")  # fmt: skip


# ---- choosing the engine -------------------------------------------------------------


@pytest.fixture
def with_pmu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(counted_mod, "pmu_status", lambda: (True, "hardware counter available"))
    monkeypatch.setattr(counted_mod, "pmu_engine", lambda: _software_engine(TASK_CLOCK))


@pytest.fixture
def without_pmu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(
        counted_mod, "pmu_status",
        lambda: (False, "no hardware instruction counter here (perf_event_open: ENOENT)"),
    )  # fmt: skip


def test_auto_counts_with_the_pmu_when_the_artefact_runs_here(with_pmu):
    eng, note = choose_engine("auto", host_arch(), None)
    assert eng is not None and eng.cpu == "testcpu"
    assert note == "counted by the hardware counter (perf_event_open task-clock:u) on testcpu"
    assert choose_engine("pmu", host_arch(), None)[0] is not None


def test_emulator_asked_for_is_obeyed(with_pmu):
    assert choose_engine("emulator", host_arch(), None) == (
        None,
        "counted under the emulator (engine: emulator)",
    )


def test_without_a_pmu_auto_and_pmu_fall_back_and_say_so(without_pmu):
    eng, note = choose_engine("auto", host_arch(), None)
    assert eng is None
    assert note == (
        "no hardware instruction counter here (perf_event_open: ENOENT): counted under the emulator"
    )
    eng, note = choose_engine("pmu", host_arch(), None)
    assert eng is None and note.startswith("engine pmu asked for, but no hardware instruction")
    assert note.endswith(": counted under the emulator") and "\n" not in note


def test_code_for_another_architecture_falls_back_to_the_emulator(with_pmu):
    other = "aarch64" if host_arch() == "x86_64" else "x86_64"
    eng, note = choose_engine("pmu", other, None)
    assert eng is None
    assert note == (
        f"engine pmu asked for, but {other} code does not run on this {host_arch()} host: "
        "counted under the emulator"
    )


@pytest.mark.skipif(host_arch() != "x86_64", reason="an x86 feature")
def test_a_build_for_features_this_cpu_lacks_falls_back(with_pmu):
    from guard.manifest.cpu import host_cpu

    if "+amx-tile" in host_cpu().features:
        pytest.skip("this CPU has AMX")
    target = "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3 -mattr=+amx-tile"
    eng, note = choose_engine("auto", "x86_64", target)
    assert eng is None and "amx-tile" in note and note.endswith("counted under the emulator")
    assert choose_engine("auto", "x86_64", "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3")[0]


@pytest.mark.parametrize("raw", [{"engine": "gpu"}, {"engine": 1}])
def test_an_unknown_engine_names_the_key(raw: object):
    from guard.core.errors import UsageError

    with pytest.raises(UsageError) as err:
        CountedConfig.from_dict(raw, where="s.yaml: defaults.measure.counted")
    assert "defaults.measure.counted.engine" in str(err.value) and "pmu" in str(err.value)
    assert CountedConfig.from_dict({"engine": "pmu"}, "x").engine == "pmu"
    assert CountedConfig().engine == "auto"


def test_a_suite_with_an_unknown_engine_is_one_line_exit_2(tmp_path: Path, capsys):
    from guard.cli.main import main

    suite = tmp_path / "s.yaml"
    suite.write_text(
        "schema_version: 1\nsuite: s\ndefaults:\n  measure: {counted: {engine: gpu}}\n"
        "models:\n  - name: mlp\n    source: zoo:mlp\n    backends: [onnxruntime]\n"
    )
    assert main(["run", str(suite), "--no-track"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "measure.counted.engine" in err and "unknown engine" in err, err


# ---- a whole run under the counter ---------------------------------------------------

SUITE = """schema_version: 1
suite: pmu
defaults:
  threads: 1
  measure: {warmup_s: 0.01, min_iters: 3, min_time_s: 0.01, max_time_s: 0.5, rounds: 1,
            counted: {inferences: 3, warmup: 1, max_s: 300}}
models:
  - name: mlp
    source: zoo:mlp
    inputs:
      x: {shape: [1, 256], dist: normal, seed: 0}
    backends: [onnxruntime, bundled]
"""


@pytest.mark.slow
@needs_cc
def test_guard_run_counts_with_the_counter_and_records_null_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, with_pmu
):
    """``guard run --counted-engine pmu`` where the counter opens: onnxruntime in the
    Python child and the bundled x86-64-v3 build in the static runner, both natively,
    each inference counted (task-clock here: these VMs have no PMU); bytes null with the
    reason; the engine and the CPU in the fingerprint; the engine said once per run."""
    if host_arch() != "x86_64":
        pytest.skip("the counting target x86-64-v3 is an x86 build")
    from guard.cli.main import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "suite.yaml").write_text(SUITE)
    out = tmp_path / "out.json"
    args = ["run", "suite.yaml", "--counted-engine", "pmu", "--no-track", "--json", str(out)]
    assert main(args) in (0, 1)
    err = capsys.readouterr().err
    note = "counted by the hardware counter (perf_event_open task-clock:u) on testcpu"
    assert err.count(f"guard: counted: {note}") == 1, err
    results = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {"onnxruntime", "bundled"}
    for r in results.values():
        c = r["counted"]
        assert "error" not in c, c
        assert c["engine"] == "perf_event_open" and c["engine_note"] == note
        assert c["inferences"] == 3 and c["instructions"] > 0
        assert c["bytes_loaded"] is None and c["bytes_stored"] is None
        assert c["bytes_note"] == BYTES_NOTE
        fp = c["fingerprint"]
        assert (fp["engine"], fp["event"], fp["cpu"]) == (
            "perf_event_open",
            "task-clock:u",
            "testcpu",
        )
        assert "emulator" not in fp and "plugin_sha256" not in fp
        check = next(k for k in r["checks"] if k["name"] == "counted")
        assert "(bytes: not counted) per inference" in check["message"], check
    assert results["bundled"]["counted"]["runs_in"] == "static runner"
    assert "x86-64-v3" in results["bundled"]["counted"]["target"]
    assert results["onnxruntime"]["counted"]["target"] == "native testcpu"
