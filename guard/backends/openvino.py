"""The openvino backend: OpenVINO reads the ONNX model, reshapes it to the suite's bound
inputs and compiles it for its CPU plugin with a fixed, recorded configuration.

build: ``Core.read_model`` (OpenVINO's ONNX frontend), ``Model.reshape`` to every bound
input shape, ``save_model`` of that model as OpenVINO IR (``model.xml``/``model.bin``, fp32
weights kept: ``compress_to_fp16=False``), then ``compile_model`` on ``CPU`` with
``INFERENCE_NUM_THREADS`` = the suite's threads, ``PERFORMANCE_HINT`` LATENCY,
``NUM_STREAMS`` 1 and ``INFERENCE_PRECISION_HINT`` f32 (without the hint the plugin picks
bf16 on hosts with AVX512-BF16 or AMX, which is not comparable with fp32 runs), and
``CACHE_DIR`` = ``cache/`` inside the artefact, so loading the artefact imports the
compiled blob instead of compiling again. The suite's ``options.openvino`` may change the
device, the precision, the hint and the streams, or add plugin properties.

Partitions and memory come from the compiled model's runtime graph
(guard.backends.openvino_graph): layers whose primitive is one of OpenVINO's reference
implementations (``ref_*``) are the fallback nodes, with their op types. OpenVINO's CPU
plugin reports no memory statistic, so the arena is None and the lower bound is the
liveness of the runtime graph.

openvino is imported inside functions only: importing guard never imports it; a suite that
asks for it where it is not installed gets exit 2 with the install command.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from guard.backends.base import BuildInfo, BuildRequest, KernelRow, MemoryInfo, PartitionInfo
from guard.backends.openvino_graph import memory_facts, partitions, profile_rows
from guard.core.errors import ModelError, UsageError
from guard.core.json_types import JsonObject
from guard.core.schema import Schema
from guard.manifest.target_string import target_arch
from guard.manifest.written import ComponentPins

PAYLOAD = "model.xml"
WEIGHTS = "model.bin"
CACHE = "cache"
META = "openvino.json"
SCHEMA_VERSION = 1
_META = Schema("openvino artefact metadata", SCHEMA_VERSION, "Rebuild the artefact.")
INSTALL = "pip install 'guard[openvino]'"
# The suite's options.openvino keys -> OpenVINO property names (and their defaults).
_OPTIONS = {
    "device": ("device", "CPU"),
    "precision": ("INFERENCE_PRECISION_HINT", "f32"),
    "performance_hint": ("PERFORMANCE_HINT", "LATENCY"),
    "streams": ("NUM_STREAMS", 1),
}
_PRECISIONS = ("f32", "bf16", "f16")
_HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")


def _ov() -> ModuleType:
    try:
        import openvino
    except ImportError:
        raise UsageError(
            "backend 'openvino' needs OpenVINO, which is not installed here",
            hint=f"Install it: {INSTALL}.",
        ) from None
    return openvino


def _text(exc: BaseException) -> str:
    """The first line of an OpenVINO error (its messages carry a C++ source trail)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Check ", "Exception from src"))]
    return ((useful or lines or [repr(exc)])[0])[:500]


def compile_config(threads: int, options: JsonObject) -> tuple[str, JsonObject]:
    """(device, the compile configuration) for the suite's threads and options.openvino:
    OpenVINO properties by name, the user's ``properties`` passed through as they are."""
    opts = dict(options)
    device = str(opts.pop("device", "CPU"))
    config: JsonObject = {"INFERENCE_NUM_THREADS": int(threads)}
    for key, (prop, default) in _OPTIONS.items():
        if prop != "device":
            config[prop] = opts.pop(key, default)
    extra = opts.pop("properties", {}) or {}
    if opts:
        raise ModelError(
            f"options.openvino: unknown option(s) {sorted(opts)}",
            hint="Known: device, precision, performance_hint, streams, properties.",
        )
    if config["INFERENCE_PRECISION_HINT"] not in _PRECISIONS:
        raise ModelError(
            f"options.openvino.precision: {config['INFERENCE_PRECISION_HINT']!r} is not one "
            f"of {', '.join(_PRECISIONS)}",
            hint="f32 is the default; bf16 and f16 trade accuracy for speed.",
        )
    config["PERFORMANCE_HINT"] = str(config["PERFORMANCE_HINT"]).upper()
    if config["PERFORMANCE_HINT"] not in _HINTS:
        raise ModelError(
            f"options.openvino.performance_hint: {config['PERFORMANCE_HINT']!r} is not one of "
            f"{', '.join(_HINTS)}"
        )
    if not isinstance(config["NUM_STREAMS"], int) or config["NUM_STREAMS"] < 1:
        raise ModelError(
            f"options.openvino.streams: expected a positive integer, got {config['NUM_STREAMS']!r}"
        )
    if not isinstance(extra, dict) or not all(isinstance(k, str) for k in extra):
        raise ModelError(
            "options.openvino.properties: expected a mapping of OpenVINO property to value",
            hint="e.g. properties: {CPU_DENORMALS_OPTIMIZATION: true}.",
        )
    for k, v in extra.items():
        config[k] = v
    return device, config


def _plugin_properties(core: Any, device: str) -> dict[str, str | list[str]]:
    """The device's identity and capabilities, as pins (read without compiling)."""
    out: dict[str, str | list[str]] = {}
    for prop in ("FULL_DEVICE_NAME", "DEVICE_ARCHITECTURE", "OPTIMIZATION_CAPABILITIES"):
        try:
            value = core.get_property(device, prop)
        except Exception:  # noqa: BLE001 - a device without that property
            continue
        out[prop] = sorted(value) if isinstance(value, list | tuple | set) else str(value)
    return out


def _compiled_properties(compiled: Any) -> dict[str, str]:
    """Every read-only property of the compiled model, as text (what the plugin chose)."""
    out: dict[str, str] = {}
    for prop in sorted(compiled.get_property("SUPPORTED_PROPERTIES")):
        if prop in ("SUPPORTED_PROPERTIES", "NETWORK_NAME"):
            continue
        try:
            out[prop] = str(compiled.get_property(prop))
        except Exception:  # noqa: BLE001 - a property the Python binding cannot convert
            continue
    return out


def _compile(core: Any, model: Any, device: str, config: JsonObject, where: Path) -> Any:
    try:
        return core.compile_model(model, device, config)
    except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError for everything
        raise ModelError(
            f"OpenVINO could not compile the model: {_text(exc)}", where=str(where)
        ) from None


class OpenVinoSession:
    """A loaded openvino artefact: the IR compiled with the recorded configuration, the
    compiled blob imported from the artefact's model cache."""

    def __init__(self, artefact_dir: Path, threads: int):
        ov = _ov()
        meta = self._meta = _META.load(artefact_dir / META)
        self._where = artefact_dir / PAYLOAD
        core = ov.Core()
        try:
            model = core.read_model(str(self._where))
        except Exception as exc:  # noqa: BLE001
            raise ModelError(
                f"OpenVINO cannot read the IR: {_text(exc)}", where=str(self._where)
            ) from None
        config = dict(meta["config"])
        config["INFERENCE_NUM_THREADS"] = int(threads)
        cache = artefact_dir / CACHE
        before = set(os.listdir(cache)) if cache.is_dir() else None
        if before is not None:
            config["CACHE_DIR"] = str(cache)
        self._compiled = _compile(core, model, meta["device"], config, self._where)
        # A blob written now (another CPU, another configuration) would change the artefact
        # after its hashes were recorded: the compiled model stays, the new file goes.
        if before is not None:
            for name in set(os.listdir(cache)) - before:
                (cache / name).unlink(missing_ok=True)
        self._request = self._compiled.create_infer_request()
        self.input_names = [i.get_any_name() for i in self._compiled.inputs]
        self.output_names = [o.get_any_name() for o in self._compiled.outputs]
        self._outputs = list(self._compiled.outputs)
        self._core, self._model, self._threads = core, model, threads

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            result = self._request.infer(feeds, share_inputs=True)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(
                f"OpenVINO failed running the model: {_text(exc)}", where=str(self._where)
            ) from None
        return [np.asarray(result[o]) for o in self._outputs]

    def bound_run(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """One inference on ``feeds`` with the input tensors set once (a counted run counts
        this call: the inference, not numpy conversions)."""
        ov = _ov()
        keep = {n: np.ascontiguousarray(feeds[n]) for n in self.input_names}
        for name, value in keep.items():
            self._request.set_tensor(name, ov.Tensor(value, shared_memory=True))
        self._request.infer()  # a warm-up with the bound tensors
        request = self._request

        def call() -> None:
            request.infer()

        call.keep = keep  # type: ignore[attr-defined]
        return call

    def kernels(
        self, feeds: dict[str, np.ndarray], top: int = 10, runs: int = 5
    ) -> list[KernelRow]:
        """The top layers by time from OpenVINO's own counters (``PERF_COUNT``), from a
        second compiled model of the same IR and configuration."""
        config = {**self._meta["config"], "INFERENCE_NUM_THREADS": self._threads}
        config["PERF_COUNT"] = True
        compiled = _compile(self._core, self._model, self._meta["device"], config, self._where)
        request = compiled.create_infer_request()
        infos = []
        for i in range(runs + 1):
            request.infer(feeds)
            if i:  # the first inference warms up
                infos.append(request.profiling_info)
        return profile_rows(infos, top)

    def partitions(self) -> PartitionInfo:
        return PartitionInfo.from_dict(self._meta["partitions"])

    def memory(self) -> MemoryInfo:
        return MemoryInfo.from_dict(self._meta["memory"])


class OpenVinoBackend:
    name = "openvino"

    def versions(self) -> tuple[ComponentPins, ComponentPins]:
        ov = _ov()
        core = ov.Core()
        version = ov.__version__.split("-")[0]
        compiler: ComponentPins = {
            "name": "openvino",
            "version": version,
            "build": ov.get_version(),
            "device": "CPU",
            "plugin": _plugin_properties(core, "CPU"),
        }
        return compiler, {"name": "openvino", "version": version}

    def build(self, req: BuildRequest) -> BuildInfo:
        ov = _ov()
        arch = target_arch(req.target_canonical)
        if arch != platform.machine():
            raise UsageError(
                f"backend 'openvino' runs on this host's CPU ({platform.machine()}), not "
                f"target {req.target_raw!r} ({arch})",
                hint="Use target: host for openvino, or bundled/tvm for foreign targets.",
            )
        device, config = compile_config(req.threads, req.options)
        core = ov.Core()
        if device not in core.available_devices:
            raise UsageError(
                f"options.openvino.device: {device!r} is not available here",
                hint=f"Available: {', '.join(core.available_devices)}.",
            )
        try:
            model = core.read_model(str(req.model_path))
            names = {i.get_any_name() for i in model.inputs}
            model.reshape({n: list(s) for n, s in req.input_shapes.items() if n in names})
        except Exception as exc:  # noqa: BLE001
            raise ModelError(
                f"OpenVINO could not read or reshape the model: {_text(exc)}",
                where=str(req.model_path),
            ) from None
        ov.save_model(model, str(req.out_dir / PAYLOAD), compress_to_fp16=False)
        # What load compiles is the IR read back: compiling that here writes the cache
        # blob load finds (the in-memory model hashes to another cache key).
        model = core.read_model(str(req.out_dir / PAYLOAD))
        cache = req.out_dir / CACHE
        cache.mkdir()
        compiled = _compile(core, model, device, {**config, "CACHE_DIR": str(cache)},
                            req.model_path)  # fmt: skip
        runtime_model = compiled.get_runtime_model()
        plugin = _compiled_properties(compiled)
        session_opts = {"device": device, **{k: str(v) for k, v in config.items()}}
        meta = {
            "schema_version": SCHEMA_VERSION,
            "device": device,
            "config": config,
            "plugin_properties": plugin,
            "cache_files": sorted(os.listdir(cache)),
            "partitions": partitions(runtime_model).to_dict(),
            "memory": memory_facts(runtime_model),
        }
        (req.out_dir / META).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
        compiler, runtime = self.versions()
        compiler["device"] = device
        compiler["config"] = session_opts
        compiler["compiled_properties"] = plugin
        return BuildInfo(
            payload=PAYLOAD, compiler=compiler, runtime=runtime, session_options=session_opts
        )

    def load(self, artefact_dir: Path, threads: int) -> OpenVinoSession:
        return OpenVinoSession(artefact_dir, threads)
