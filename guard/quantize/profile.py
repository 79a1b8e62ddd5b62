"""Profile-guided calibration: run the samples through the compiled fp32 graph, record ranges.

As Glow does it (pytorch/glow/lib/Quantization/Quantization.cpp and its
pytorch/glow/docs/Quantization.md): the model is imported and optimised by the bundled
compiler's fp32 passes first, so the tensors that are profiled are the ones the compiled
model computes: a Conv fused with its BatchNorm and Relu is profiled once, at the Relu's
output, and the Conv's raw output (which no compiled model stores) is not. Only the passes
that change values run (``fp32_entries()``): the layout passes move data, not values, and
the profile reads NCHW tensors. Those tensors' values come from onnxruntime running the
source model with them as extra outputs (guard.quantize.ort_profile: the same values to
float rounding, seconds instead of minutes on a large CNN); where onnxruntime cannot run
the model, the reference interpreter runs the optimised graph with every float tensor
kept. Each tensor's ``TensorStats`` takes every sample.

The IR keeps the ONNX tensor names through import and fusion (a fused chain writes its
last op's output name), so a profiled tensor is an ONNX tensor of the source model; a value
the passes created under a new name is not profiled and never gets Q/DQ.

A ``Profile`` is an artefact like the tuning cache: versioned JSON carrying the source
model's sha256, the calibration data's sha256 and the passes it ran after; its own sha256
(of its canonical JSON bytes) names it in the manifest and keys the int8 build cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import onnx

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.ir.isa_table import DEFAULT_TABLE
from guard.compiler.passes.assign_layout import AssignLayout
from guard.compiler.passes.conv_rows import ConvRows
from guard.compiler.passes.elide_concat import ElideConcat
from guard.compiler.passes.pipeline import PIPELINES, Entry, FixedPoint
from guard.core.errors import UsageError
from guard.core.fsutil import read_bounded_text
from guard.quantize.calibration import Calibration
from guard.quantize.ort_profile import Runner, ort_runner
from guard.quantize.ranges import BINS, TensorStats, TensorStatsJson

SCHEMA_VERSION = 1
KIND = "guard.quantize.profile"


class ProfiledTensorJson(TensorStatsJson):
    op: str  # the IR op that computes it ("" where unknown)


class ProfileJson(TypedDict):
    """A profile file (Profile.to_json)."""

    schema_version: int
    kind: str
    source_sha256: str
    calibration_sha256: str
    samples: int
    shapes: dict[str, list[int]]
    passes: list[str]
    bins: int
    tensors: dict[str, ProfiledTensorJson]


# O2's passes that move data without changing a value: not run before profiling.
LAYOUT_PASSES = (AssignLayout, ConvRows, ElideConcat)


def fp32_entries() -> list[Entry]:
    """O2's entries without the layout passes (module doc)."""
    return [
        e
        for e in PIPELINES["O2"](DEFAULT_TABLE)
        if isinstance(e, FixedPoint) or not isinstance(e[0], LAYOUT_PASSES)
    ]


def pass_names(entries: list[Entry]) -> list[str]:
    """The pass names of ``entries`` in order (a fixed point's passes once)."""
    out: list[str] = []
    for e in entries:
        if isinstance(e, FixedPoint):
            out.extend(p.name for p, _ in e.passes)
        else:
            out.append(e[0].name)
    return out


@dataclass
class Profile:
    """Every profiled tensor's stats, and what they were made from."""

    source_sha256: str
    calibration_sha256: str
    samples: int
    shapes: dict[str, list[int]]
    passes: list[str]
    tensors: dict[str, TensorStats] = field(default_factory=dict)
    ops: dict[str, str] = field(default_factory=dict)  # tensor -> the IR op that computes it

    def to_json(self) -> ProfileJson:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "source_sha256": self.source_sha256,
            "calibration_sha256": self.calibration_sha256,
            "samples": self.samples,
            "shapes": self.shapes,
            "passes": self.passes,
            "bins": BINS,
            "tensors": {
                name: {"op": self.ops.get(name, ""), **s.to_json()}
                for name, s in sorted(self.tensors.items())
            },
        }

    def text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")) + "\n"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.text())
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Profile:
        try:
            doc = json.loads(read_bounded_text(path))
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"cannot read the quantization profile: {exc}",
                where=str(path),
                hint="Delete it (guard quantize writes a new one) or pass another --profile.",
            ) from None
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise UsageError(
                "is not a guard quantization profile",
                where=str(path),
                hint="Pass a file `guard quantize --profile` wrote, or a new path.",
            )
        if doc.get("schema_version") != SCHEMA_VERSION or doc.get("bins") != BINS:
            raise UsageError(
                f"profile schema_version {doc.get('schema_version')!r} (bins "
                f"{doc.get('bins')!r}); this guard reads {SCHEMA_VERSION} ({BINS} bins)",
                where=str(path),
                hint="Delete it: guard quantize profiles again.",
            )
        try:
            return cls(
                source_sha256=str(doc["source_sha256"]),
                calibration_sha256=str(doc["calibration_sha256"]),
                samples=int(doc["samples"]),
                shapes={k: list(v) for k, v in doc["shapes"].items()},
                passes=list(doc["passes"]),
                tensors={k: TensorStats.from_json(v) for k, v in doc["tensors"].items()},
                ops={k: str(v.get("op", "")) for k, v in doc["tensors"].items()},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"the quantization profile is malformed ({type(exc).__name__}: {exc})",
                where=str(path),
                hint="Delete it: guard quantize profiles again.",
            ) from None


def _onnx_tensors(model: onnx.ModelProto) -> set[str]:
    return {o for n in model.graph.node for o in n.output if o} | {
        i.name for i in model.graph.input
    }


def profile_model(
    model: onnx.ModelProto,
    source_sha256: str,
    calibration: Calibration,
    progress: Callable[[int, int], None] | None = None,
) -> Profile:
    """Profile every float tensor of the fp32-optimised graph over the calibration samples."""
    entries = fp32_entries()
    graph = import_onnx(model, calibration.shapes)
    graph, _ = optimize(graph, entries=entries)
    names = _onnx_tensors(model)
    ops = {o: n.op for n in graph.nodes for o in n.outputs}
    wanted = [
        v
        for v in [*graph.inputs, *ops]
        if v in names and np.issubdtype(graph.values[v].dtype, np.floating)
    ]
    graph.outputs = list(dict.fromkeys([*graph.outputs, *wanted]))
    prof = Profile(
        source_sha256=source_sha256,
        calibration_sha256=calibration.sha256,
        samples=len(calibration.samples),
        shapes={k: list(v) for k, v in calibration.shapes.items()},
        passes=pass_names(entries),
        tensors={t: TensorStats() for t in wanted},
        ops={t: ops.get(t, "input") for t in wanted},
    )
    dtypes = {t: np.dtype(graph.values[t].dtype) for t in wanted}
    fast = ort_runner(model, wanted, dtypes)
    if fast is not None:
        try:
            return _collect(prof, wanted, fast, calibration, progress)
        except Exception:  # noqa: BLE001 (onnxruntime refused a sample: the reference runs)
            prof.tensors = {t: TensorStats() for t in wanted}
    return _collect(prof, wanted, lambda f: run_reference(graph, f), calibration, progress)


def _collect(
    prof: Profile,
    wanted: list[str],
    run: Runner,
    calibration: Calibration,
    progress: Callable[[int, int], None] | None,
) -> Profile:
    for k, feeds in enumerate(calibration.samples):
        outs = run(feeds)
        for t in wanted:
            prof.tensors[t].update(outs[t])
        if progress:
            progress(k + 1, len(calibration.samples))
    return prof
