"""Issue 39's "done when": guard quantize on real-weight classifiers and light topologies.

For each model: ``--calibration`` samples profile it (guard.quantize, percentile method,
per-channel s8 weights, u8 activations), then the int8 model runs on onnxruntime, OpenVINO
and the bundled compiler over ``--eval`` other inputs, and its top-1 agreement with the
fp32 model (onnxruntime) is printed per runtime, with the worst tensors of guard's
per-tensor report. On the light topologies onnxruntime's own ``quantize_static`` (QDQ,
per channel, u8/s8, the same calibration data) is run beside it.

Inputs: PP-OCR's direction classifier (rapidocr-onnxruntime) gets text lines rendered with
PIL and DejaVu fonts, half of them turned 180 degrees (what it classifies); magika gets the
byte features magika itself extracts from files of this machine (Python sources, shared
objects, text, JSON, images from installed packages); the light topologies (seeded random
weights) get N(0, 1) images.

    python benchmarks/quantize_agreement.py [--eval 200] [--calibration 64] [MODEL ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

Feeds = dict[str, np.ndarray]


def _text_lines(n: int, seed: int) -> list[np.ndarray]:
    from PIL import Image, ImageDraw, ImageFont

    fonts = sorted(Path("/usr/share/fonts/truetype/dejavu").glob("*.ttf"))
    rng = np.random.default_rng(seed)
    words = (
        "guard quantize profile tensor range histogram entropy percentile channel scale "
        "zero point calibration onnx runtime compiler kernel latency model backend target "
        "invoice total amount date name address 2026 12 04 receipt number 0123456789"
    ).split()
    out = []
    for k in range(n):
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 6))))
        font = ImageFont.truetype(
            str(fonts[int(rng.integers(len(fonts)))]), int(rng.integers(22, 34))
        )
        img = Image.new("RGB", (400, 48), tuple(int(v) for v in rng.integers(200, 256, 3)))
        ImageDraw.Draw(img).text(
            (4, 6), text, fill=tuple(int(v) for v in rng.integers(0, 60, 3)), font=font
        )
        w = min(400, int(ImageDraw.Draw(img).textlength(text, font=font)) + 8)
        img = img.crop((0, 0, w, 48)).resize((min(192, int(w * 48 / 48)), 48))
        if k % 2:
            img = img.rotate(180)
        canvas = np.zeros((48, 192, 3), np.float32)
        a = (np.asarray(img, np.float32) / 255.0 - 0.5) / 0.5
        canvas[:, : a.shape[1]] = a  # PP-OCR pads the right with zeros after normalising
        out.append(canvas.transpose(2, 0, 1)[None].copy())
    return out


def _magika_features(n: int, skip: int) -> list[np.ndarray]:
    from magika import Magika

    m = Magika()
    roots = [Path(sys.prefix) / "lib", Path("/usr/share"), Path("/etc")]
    files: list[Path] = []
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() and not p.is_symlink() and 64 < p.stat().st_size < 50_000_000:
                files.append(p)
            if len(files) > 20 * (n + skip):
                break
    rng = np.random.default_rng(0)
    rng.shuffle(files)  # a mix of kinds, not one package's files in a row
    out: list[np.ndarray] = []
    for p in files:
        try:
            _, f = m._get_result_or_features_from_path(p)
        except OSError:
            continue
        if f is None:
            continue
        out.append(np.asarray([f.beg + f.end], np.int32))
        if len(out) == n + skip:
            break
    return out[skip:]


def _normal(shape: tuple[int, ...]) -> Callable[[int, int], list[np.ndarray]]:
    def make(n: int, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]

    return make


def models() -> dict[str, tuple[Path, str, Callable[[int, int], list[np.ndarray]], bool]]:
    """name -> (path, input name, sample maker (n, seed), light topology)."""
    from guard import zoo
    from guard.zoo.wheels import wheel_model

    cls, why = wheel_model("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    mag, why2 = wheel_model("magika", "models/standard_v3_3/model.onnx")
    assert cls and mag, (why, why2)
    return {
        "ppocr_cls": (cls, "x", _text_lines, False),
        "magika": (
            mag,
            "bytes",
            lambda n, seed: _magika_features(n, skip=0 if seed == 1 else 100),
            False,
        ),
        "squeezenet": (zoo.model_path("squeezenet"), "data_0", _normal((1, 3, 224, 224)), True),
        "shufflenet": (
            zoo.model_path("shufflenet"),
            "gpu_0/data_0",
            _normal((1, 3, 224, 224)),
            True,
        ),
    }


def _argmax(out: np.ndarray) -> int:
    return int(np.asarray(out).reshape(-1).argmax())


def _ort_quantize(fp32: Path, name: str, cal: list[np.ndarray], out: Path) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    m = onnx.load(str(fp32))
    if next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) < 13:
        m = onnx.version_converter.convert_version(m, 13)  # per-axis DQ needs 13 (FACTS.md)
    src = out.with_suffix(".fp32-13.onnx")
    onnx.save(m, str(src))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([{name: c} for c in cal])

        def get_next(self) -> dict | None:
            return next(self.it, None)

    quantize_static(
        str(src), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip


def measure(name: str, n_eval: int, n_cal: int, work: Path, method: str = "percentile") -> None:
    import onnxruntime as ort
    import openvino as ov

    from guard.backends import get_backend
    from guard.backends.base import BuildRequest
    from guard.core.fsutil import file_sha256
    from guard.quantize import QuantOptions, quantize_model
    from guard.quantize.calibration import Calibration

    path, inp, make, light = models()[name]
    cal_x, eval_x = make(n_cal, 1), make(n_eval, 2)
    cal = Calibration.from_feeds([{inp: c} for c in cal_x], f"{name} calibration")
    t0 = time.perf_counter()
    q = quantize_model(
        path,
        cal,
        QuantOptions(method=method),
        source_sha256=file_sha256(path),
        report_samples=4 if light else 16,
    )
    t_q = time.perf_counter() - t0
    int8 = work / f"{name}.int8.onnx"
    onnx.save(q.model, str(int8))
    onnx.checker.check_model(onnx.load(str(int8)), full_check=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    f32 = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ref_out = [np.asarray(f32.run(None, {inp: x})[0]) for x in eval_x]
    ref = [_argmax(o) for o in ref_out]

    def agree(run: Callable[[np.ndarray], np.ndarray]) -> str:
        outs = [np.asarray(run(x)) for x in eval_x]
        top1 = np.mean([_argmax(o) == r for o, r in zip(outs, ref, strict=True)])
        noise = sum(
            float(np.sum((o.astype(np.float64) - f) ** 2))
            for o, f in zip(outs, ref_out, strict=True)
        )
        signal = sum(float(np.sum(f.astype(np.float64) ** 2)) for f in ref_out)
        return f"{top1:.3f} ({10 * np.log10(signal / max(noise, 1e-30)):.1f} dB)"

    s8 = ort.InferenceSession(str(int8), so, providers=["CPUExecutionProvider"])
    core = ov.Core()
    cm = core.compile_model(
        core.read_model(str(int8)), "CPU",
        {"INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": "f32"},
    )  # fmt: skip
    art = work / f"{name}.bundled"
    art.mkdir(exist_ok=True)
    backend = get_backend("bundled")
    backend.build(BuildRequest(int8, {inp: tuple(eval_x[0].shape)}, "host", "host", 1, art))
    bsess = backend.load(art, threads=1)
    rows = {
        "onnxruntime": agree(lambda x: s8.run(None, {inp: x})[0]),
        "openvino": agree(lambda x: cm(x)[0]),
        "bundled": agree(lambda x: bsess.run({inp: x})[0]),
    }
    line = (
        f"{name} ({method}; fp32 top-1 spans {len(set(ref))} classes): "
        f"{len(q.plan.activations)} activations, {len(q.plan.weights)} weights, "
        f"{len(q.plan.kept)} kept fp32; quantize {t_q:.1f} s ({n_cal} samples); output SQNR "
        f"{q.output_sqnr_db:.1f} dB; top-1 agreement (output SQNR) with fp32 on {n_eval} inputs: "
        + ", ".join(f"{k} {v}" for k, v in rows.items())
    )
    if light:
        ort_q = work / f"{name}.ort-int8.onnx"
        _ort_quantize(path, inp, cal_x, ort_q)
        so8 = ort.InferenceSession(str(ort_q), so, providers=["CPUExecutionProvider"])
        line += f"; onnxruntime quantize_static: {agree(lambda x: so8.run(None, {inp: x})[0])}"
    print(line)
    worst = ", ".join(f"{e.tensor} ({e.node}) {e.sqnr_db:.1f} dB" for e in q.worst[:3])
    print(f"  worst tensors: {worst}")
    print(f"  profile sha256 {q.profile_sha256[:16]}  calibration sha256 {cal.sha256[:16]}")
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "models", nargs="*", default=["ppocr_cls", "magika", "squeezenet", "shufflenet"]
    )
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--calibration", type=int, default=64)
    ap.add_argument("--method", default="percentile", choices=("minmax", "percentile", "entropy"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            measure(name, args.eval, args.calibration, Path(tmp), args.method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
