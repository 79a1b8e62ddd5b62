"""The calibration samples through onnxruntime: the profiled tensors as graph outputs.

As onnxruntime's own calibrator does it (onnxruntime.quantization.calibrate: the tensors to
collect are appended to the model's outputs and one session runs every sample), with
every graph optimisation off so each tensor is the source model's own arithmetic (the
golden producer guard compares against). The tensors asked for are the ones
guard.quantize.profile picked on the fp32-optimised IR graph: ONNX tensors of the source
model, which the IR keeps by name through import and fusion, so onnxruntime computes the
same values the reference interpreter computes on the fused graph, to float rounding, in a
small part of the time (DenseNet-121's 8 samples: seconds, not the reference
interpreter's tens of seconds). One intra-op thread: the sums run in one order, so the same
samples give the same profile on the same machine.

A model onnxruntime cannot load or run (an op it lacks, a model past its protobuf limit)
returns ``None`` here, and the profile runs on the reference interpreter as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


def ort_runner(
    model: onnx.ModelProto, names: Sequence[str], dtypes: Mapping[str, np.dtype]
) -> Runner | None:
    """A function from one sample's feeds to ``names``' values (graph inputs among them
    are taken from the feeds), or None where onnxruntime cannot load the model."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    inputs = {i.name for i in model.graph.input}
    asked = [n for n in names if n not in inputs]
    # the outputs are added to ``model`` for the serialisation only (a copy of a large
    # model's weights would cost as much as the serialisation itself)
    first = len(model.graph.output)
    have = {o.name for o in model.graph.output}
    try:
        for n in asked:
            if n not in have:
                elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtypes[n]))
                model.graph.output.append(onnx.helper.make_tensor_value_info(n, elem, None))
        data = model.SerializeToString()
    except Exception:  # noqa: BLE001 (past protobuf's 2 GiB: the reference interpreter runs it)
        return None
    finally:
        del model.graph.output[first:]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 (any refusal: the reference interpreter runs it)
        return None
    want = set(names)

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        got = sess.run(asked, dict(feeds))
        out = {n: np.asarray(v) for n, v in zip(asked, got, strict=True)}
        out.update({n: v for n, v in feeds.items() if n in want})
        return out

    return run
