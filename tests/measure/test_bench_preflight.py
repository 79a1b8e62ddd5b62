"""Preflight facts from a fake /proc and /sys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guard.core.errors import UsageError
from guard.measure import preflight, read_cpu_times, set_threads
from guard.measure.preflight import THREAD_ENV_VARS, CpuTimes, contention_between


def fake_root(tmp_path: Path, loadavg: str | None, governors: dict[int, str]) -> Path:
    (tmp_path / "proc").mkdir()
    if loadavg is not None:
        (tmp_path / "proc" / "loadavg").write_text(loadavg + "\n")
    for cpu, gov in governors.items():
        d = tmp_path / "sys/devices/system/cpu" / f"cpu{cpu}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(gov + "\n")
    return tmp_path


def test_quiet_tuned_machine_has_no_warnings(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0.20 0.10 0.05 1/91 5955", {0: "performance", 1: "performance"})
    f = preflight(1, root=root, affinity=lambda: {1, 0}, cpu_count=lambda: 2)
    assert f["loadavg"] == {"1": 0.2, "5": 0.1, "15": 0.05}
    assert f["governor"] == {"0": "performance", "1": "performance"}
    assert f["affinity"] == [0, 1]
    assert (f["cores"], f["threads"], f["contention"]) == (2, 1, None)
    assert f["warnings"] == []


def test_every_untrustworthy_fact_warns(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "1.80 0.50 0.30 3/91 5955", {0: "powersave", 1: "performance"})
    f = preflight(4, contention=0.5, root=root, affinity=lambda: {0, 1}, cpu_count=lambda: 2)
    w = f["warnings"]
    assert len(w) == 4
    assert "load average 1.80 exceeds 2 cores - 0.5" in w[0]
    assert "powersave" in w[1] and "CPUs 0:" in w[1]
    assert "threads=4 exceeds the 2 CPUs" in w[2]
    assert "other processes used 50%" in w[3]
    assert f["contention"] == 0.5


def test_load_just_below_the_threshold_does_not_warn(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "1.50 1.0 1.0 1/1 1", {})
    f = preflight(1, root=root, affinity=lambda: {0, 1}, cpu_count=lambda: 2)
    assert f["warnings"] == []


def test_unreadable_governor_and_load_are_null_not_warnings(tmp_path: Path) -> None:
    root = fake_root(tmp_path, None, {})
    f = preflight(1, root=root, affinity=lambda: {0, 3}, cpu_count=lambda: 4)
    assert f["loadavg"] is None
    assert f["governor"] == {"0": None, "3": None}
    assert f["warnings"] == []


def test_governor_only_for_cpus_we_may_run_on(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "0 0 0 1/1 1", {0: "powersave", 1: "performance"})
    f = preflight(1, root=root, affinity=lambda: {1}, cpu_count=lambda: 2)
    assert f["governor"] == {"1": "performance"}
    assert f["warnings"] == []


def test_read_cpu_times_from_fake_proc_stat(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/stat").write_text(
        "cpu  100 5 50 800 40 3 2 10 7 0\ncpu0 50 0 25 400 20 1 1 5 0 0\n"
    )
    tick = os.sysconf("SC_CLK_TCK")
    c = read_cpu_times(tmp_path)
    assert c is not None
    assert c.busy_s == pytest.approx((100 + 5 + 50 + 3 + 2 + 10) / tick)  # guest not re-added
    assert c.total_s == pytest.approx((170 + 800 + 40) / tick)
    assert c.own_s >= 0


def test_read_cpu_times_missing_is_none(tmp_path: Path) -> None:
    assert read_cpu_times(tmp_path) is None


def test_contention_needs_a_long_enough_window() -> None:
    assert contention_between(CpuTimes(0, 0, 0), CpuTimes(0.01, 0.02, 0.0)) is None
    assert contention_between(None, CpuTimes(0, 0, 0)) is None
    # others can't exceed the whole spare capacity (tick rounding): clamp to 1
    assert contention_between(CpuTimes(0, 0, 0), CpuTimes(2.0, 1.0, 0.0)) == 1.0


def test_set_threads_sets_every_library_and_returns_previous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k in THREAD_ENV_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    prev = set_threads(2)
    assert prev["OMP_NUM_THREADS"] == "8" and prev["MKL_NUM_THREADS"] is None
    assert all(os.environ[k] == "2" for k in THREAD_ENV_VARS)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_set_threads_rejects_non_positive_integers(bad: object) -> None:
    with pytest.raises(UsageError, match="threads"):
        set_threads(bad)  # type: ignore[arg-type]
