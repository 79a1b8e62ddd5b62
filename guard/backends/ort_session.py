"""onnxruntime sessions as guard makes them: fixed, recorded options; ORT's errors as
guard's (one line, the model named, the exit code of a model problem).

Shared by the backend (guard.backends.onnxruntime), its memory probe
(guard.backends.ort_memory, guard.backends.ort_probe) and the tools that open a session of
their own (guard reduce, the benchmarks).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from guard.core.errors import ModelError, UnsupportedOpError

if TYPE_CHECKING:
    import onnxruntime  # imported on first use at run time: loading it costs ~0.2 s

FALLBACK_PROVIDER = "CPUExecutionProvider"

_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


def _ort() -> ModuleType:
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # errors only: keep the console readable
    return onnxruntime


def session_options(
    threads: int,
    level: str = "all",
    *,
    profile_dir: Path | None = None,
    optimized_path: Path | None = None,
) -> onnxruntime.SessionOptions:
    ort = _ort()
    if level not in _LEVELS:
        raise ModelError(
            f"options.onnxruntime.graph_optimization_level: unknown level {level!r}",
            hint=f"Use one of: {', '.join(_LEVELS)}.",
        )
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Spinning threads burn the other core between runs and disturb what we measure.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.log_severity_level = 3
    if optimized_path is not None:
        so.optimized_model_filepath = str(optimized_path)
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_dir / "ort_profile")
    return so


def _ort_text(exc: BaseException) -> str:
    """The first line of an onnxruntime error, safe to print (it may carry model bytes)."""
    if isinstance(exc, UnicodeDecodeError):
        # pybind11 could not decode ORT's message (it quoted invalid UTF-8 from the model).
        raw = exc.object if isinstance(exc.object, bytes) else b""
        return (
            raw.decode("utf-8", "replace").strip().splitlines()[0][:300]
            if raw.strip()
            else "an error message that is not valid UTF-8"
        )
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else repr(exc)


def _classify_ort_error(exc: Exception, model: Path) -> Exception:
    text = _ort_text(exc)
    low = text.lower()
    if (
        "not_implemented" in low
        or "could not find an implementation" in low
        or "no opset import for domain" in low
        or "is not a registered function" in low
    ):
        return UnsupportedOpError(
            f"onnxruntime cannot run an operator: {text}",
            where=str(model),
            hint="Replace the operator or use a backend that supports it.",
        )
    return ModelError(f"onnxruntime rejected the model: {text}", where=str(model))
