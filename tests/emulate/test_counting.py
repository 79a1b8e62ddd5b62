"""The counting engine: guard's TCG plugin counts exactly between its markers.

A small C program marks three regions of a known loop; the plugin, built by guard with the
system C compiler, must count each region's instructions and loads exactly (the loop is
1 + 6 x 1000 instructions at -O1, verified against its disassembly, and 1000 4-byte loads).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from guard.emulate.counted import CountedConfig
from guard.emulate.counting import EMULATORS, START_X86, STOP_X86, engine, run_counted
from guard.emulate.tools import ToolMissing

needs_qemu = pytest.mark.skipif(
    shutil.which(EMULATORS["x86_64"]) is None or shutil.which("cc") is None,
    reason="qemu-x86_64 or cc not installed (apt-get install -y qemu-user gcc)",
)

PROGRAM = r"""
#include <stdio.h>
#define START() __asm__ volatile(".byte %s" ::: "memory")
#define STOP() __asm__ volatile(".byte %s" ::: "memory")
volatile float a[1000];
int main(void) {
    float s = 0;
    for (int r = 0; r < 3; r++) {
        START();
        for (int i = 0; i < 1000; i++) s += a[i];
        STOP();
    }
    printf("%%f\n", s);
    return 0;
}
"""


def _bytes(code: bytes) -> str:
    return ",".join(f"0x{b:02x}" for b in code)


@needs_qemu
def test_the_plugin_counts_each_marked_region_exactly(tmp_path: Path):
    src = tmp_path / "loop.c"
    src.write_text(PROGRAM % (_bytes(START_X86), _bytes(STOP_X86)))
    exe = tmp_path / "loop"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], check=True, timeout=120)
    regions = run_counted(engine("x86_64", cache_dir=tmp_path / "cache"), [str(exe)],
                          timeout_s=120)  # fmt: skip
    assert len(regions) == 3
    for r in regions:
        assert r.instructions == 6001  # mov $0; then 6 instructions a float
        assert (r.loads, r.bytes_loaded) == (1000, 4000)
        assert (r.stores, r.bytes_stored) == (0, 0)


def test_no_emulator_is_one_line_naming_the_packages(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissing) as err:
        engine("x86_64")
    text = str(err.value)
    assert "qemu-user" in text and "gcc" in text and "\n" not in text


@pytest.mark.parametrize(
    "raw",
    [{"inferences": 0}, {"inferences": 2.5}, {"max_s": -1}, {"warmup": -1}, {"bogus": 1}, [1]],
)
def test_a_bad_counted_block_is_refused(raw: object):
    from guard.core.errors import UsageError

    with pytest.raises(UsageError):
        CountedConfig.from_dict(raw, where="suite.yaml: defaults.measure.counted")


def test_the_counted_defaults():
    assert CountedConfig.from_dict(None, "x") == CountedConfig()
    assert CountedConfig.from_dict({"inferences": 3, "max_s": 60}, "x").inferences == 3


def test_the_pmu_probe_answers_with_its_reason():
    from guard.emulate.pmu import pmu_status

    ok, why = pmu_status()
    assert isinstance(ok, bool) and "perf_event_open" in why
    assert ("available" in why) == ok
