"""The memory ladder's quantise hook (guard.compiler.fit.int8): quantise the fp32 model the
ladder climbs and return its optimised int8 graph.

guard.compiler cannot import guard.quantize (the layer table), so ``guard fit`` and the
bundled backend, which sit above both, make the hook here and hand it to ``climb``. The
ranges come from the user's calibration data when given (``--calibration DATA``,
``options.bundled.calibration``), else from ``SEEDED`` seeded standard-normal inputs
(guard.quantize.calibration.seeded_samples), which the rung says. The profile (the
samples run through onnxruntime) and the QDQ model are kept in guard run's int8 cache
(``$GUARD_CACHE/int8``: guard.quantize.build.kept_model_path, the profile keyed by the
model's and the data's sha256, the model by the profile's, the options and the writer's
sources), so a second ladder of the same model and data neither profiles nor writes again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from guard.compiler import import_onnx, optimize, verify
from guard.compiler.fit.int8 import Quantised, QuantiseHook
from guard.compiler.ir.isa_table import TargetTable
from guard.core.fsutil import file_sha256
from guard.core.user_cache import cache_root
from guard.quantize.build import kept_model_path
from guard.quantize.calibration import Calibration, read_calibration, seeded_samples
from guard.quantize.qdq import QuantOptions
from guard.suite import InputSpec
from guard.suite.model import bind, graph_inputs, load_model

SEEDED = 8


def calibration_for(
    model_path: Path, input_shapes: Mapping[str, Sequence[int]], data: Path | None
) -> tuple[Calibration, str]:
    """The samples and the rung's line on them."""
    model = load_model(model_path)
    if data is not None:
        cal = read_calibration(data, graph_inputs(model, str(model_path)))
        return cal, f"calibrated on {data.name} ({len(cal.samples)} samples)"
    specs = {k: InputSpec(k, tuple(v)) for k, v in input_shapes.items()}
    spec = bind(model, model_path, specs, str(model_path))
    cal = seeded_samples(spec, specs, SEEDED, f"{SEEDED} seeded inputs")
    return cal, f"calibrated on {SEEDED} seeded inputs; pass --calibration for real ranges"


def quantise_hook(
    model_path: Path,
    input_shapes: Mapping[str, Sequence[int]],
    *,
    pipeline: str = "O2",
    table: TargetTable | None = None,
    calibration: Path | None = None,
) -> QuantiseHook:
    """A hook that quantises ``model_path`` (QDQ, per-channel weights, u8 percentile
    activations: guard quantize's defaults) and imports and optimises the result the way
    the fp32 graph was (``pipeline``, the target's layout ``table``)."""

    def hook() -> Quantised:
        cal, line = calibration_for(model_path, input_shapes, calibration)
        # guard run's int8 cache (guard.run.int8): the same model and data profile once,
        # and the QDQ model of a profile is written once
        path = kept_model_path(
            model_path, cal, QuantOptions(), source_sha256=file_sha256(model_path),
            root=cache_root() / "int8",
        )  # fmt: skip
        graph = import_onnx(path, dict(input_shapes))
        optimised, _ = optimize(graph, pipeline, target=table)
        verify(optimised)
        return Quantised(optimised, line)

    return hook
