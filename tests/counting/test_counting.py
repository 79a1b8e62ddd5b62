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

from guard.counting.count import CountedConfig
from guard.counting.emulator import EMULATORS, START_X86, STOP_X86, engine, run_counted
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
    from guard.counting.pmu import pmu_status

    ok, why = pmu_status()
    assert isinstance(ok, bool) and "perf_event_open" in why
    assert ("available" in why) == ok


def test_the_figure_is_the_least_counted_inference(tmp_path: Path, monkeypatch):
    """An inference that runs extra work (an arena growing, a symbol resolved late) adds to
    the count: the figure is the least inference, the same in every process, not a mean
    that moves with where the extra work fell."""
    import numpy as np

    from guard.counting import count as counted
    from guard.counting.emulator import Engine, Region

    eng = Engine("x86_64", "qemu-x86_64", "7.2.0", tmp_path / "p.so", "0" * 64)
    regions = [
        Region(1200, 12, 6, 48, 24),
        Region(1000, 10, 5, 40, 20),
        Region(1000, 10, 5, 40, 20),
    ]
    monkeypatch.setattr(counted, "_count_in_python", lambda *a, **k: (eng, regions))
    (tmp_path / "a").mkdir()
    block = counted.count_artefact(
        "onnxruntime", tmp_path / "a", {"x": np.zeros(2, np.float32)}, CountedConfig(3, 1),
        target="llvm",
    )  # fmt: skip
    assert (block["instructions"], block["bytes_loaded"], block["stores"]) == (1000, 40, 5)
    assert block["spread_pct"] == pytest.approx(20.0)


def test_the_bound_onnxruntime_run_computes_what_run_does(tmp_path: Path):
    import numpy as np
    import onnx

    from guard.backends.onnxruntime import OrtSession
    from guard.backends.ort_session import session_options
    from guard.zoo.mlp import build

    ort = pytest.importorskip("onnxruntime")
    model = tmp_path / "m.onnx"
    onnx.save(build(), model)
    sess = ort.InferenceSession(str(model), session_options(1), providers=["CPUExecutionProvider"])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)}
    ort_session = OrtSession.__new__(OrtSession)
    ort_session._sess, ort_session._where = sess, str(model)
    ort_session.input_names, ort_session.output_names = ["x"], ["logits"]
    call = ort_session.bound_run(feeds)
    call()
    bound = call.keep[-1].numpy()  # type: ignore[attr-defined]
    np.testing.assert_allclose(bound, sess.run(None, feeds)[0], rtol=1e-6)
