"""The manifest as guard writes it: one ``TypedDict`` per section.

A TypedDict, not a record: these are the JSON objects the writers build (build_manifest,
the captures, a backend's version pins), key for key and explicit nulls included, so the
written manifest stays byte for byte what it was while mypy checks every key. Readers read
a manifest as guard.results.manifest.Manifest (its typed record, lenient about older
files); only what the pins hash and what the artefact cache keys on reads these.
"""

from __future__ import annotations

from typing import NotRequired, Required, TypedDict

from guard.core.json_types import Json, JsonObject


class ComponentPins(TypedDict, total=False):
    """``compiler`` / ``runtime``: name and version, and what a backend pins besides
    (the whole block is pinned: a key a backend adds here is a pin)."""

    name: Required[str]
    version: Required[str]
    # onnxruntime's compiler
    graph_optimization_level: str
    # openvino's compiler: the build, the device, the plugin's and the compiled model's
    # properties as OpenVINO reports them, and the config it was compiled with
    build: str
    device: str
    plugin: JsonObject
    config: JsonObject
    compiled_properties: JsonObject
    # tvm's compiler
    llvm_version_major: int
    tvm_ffi_version: str
    # the bundled compiler (guard.compiler.runtime.artefact): its pipeline, target,
    # profile and the codegen pins of a native artefact
    pipeline: str
    target: Json
    profile: Json
    codegen: JsonObject
    # the bundled runtime's numpy (guard.backends.bundled.runtime_pins)
    numpy: str


class BlasBuild(TypedDict):
    """numpy's BLAS as built (numpy.show_config)."""

    name: str | None
    version: str | None
    config: str | None


class GpuDriver(TypedDict):
    """The NVIDIA driver and CUDA versions."""

    vendor: str
    driver: str | None
    cuda: str | None


class DriverPins(TypedDict):
    """What sits under the runtime (guard.manifest.capture.capture_driver)."""

    kernel: str | None
    cpu: str | None
    microcode: str | None
    blas: BlasBuild | None
    gpu: GpuDriver | None


class TargetPins(TypedDict):
    raw: str
    canonical: str


class TuningCachePins(TypedDict):
    """The tuned-schedule cache: every key present (explicit nulls), and the observations
    some backends add (guard.manifest.pins.tuning_cache_record)."""

    path: str | None
    sha256: str | None
    entries: int | None
    hits: int | None
    misses: int | None
    tasks: NotRequired[Json]
    missed: NotRequired[list[Json]]
    kernel_speedup: NotRequired[float]


class TuningObservations(TypedDict, total=False):
    """What a backend's build observed of a tuning cache (BuildInfo.tuning, as build.json
    keeps it), merged over the cache's {path, sha256} pin into the manifest's
    ``tuning_cache`` (which keeps the TuningCachePins keys of it)."""

    path: str | None
    sha256: str | None
    entries: int | None
    hits: int | None
    misses: int | None
    tasks: Json  # a count (bundled, tvm's build) or the task names (tvm's tuning)
    missed: list[Json]
    kernel_speedup: float
    target: str  # the canonical target looked up
    # tvm (guard.backends.tvm_tuning.Lookup): misses by cause, the cache's failed
    # records and core counts, and the schedules TVM applied
    misses_tuned_for_other_target: int
    misses_failed_trials_only: int
    failed_records: int
    tuned_num_cores: list[int]
    applied: int


class ModelPins(TypedDict):
    sha256: str
    opset: int | None
    inputs: JsonObject  # {name: {shape, dtype, ...}} as bound (ModelSpec.inputs_manifest)


class HostPins(TypedDict):
    """The machine measuring (guard.manifest.capture.capture_host)."""

    arch: str
    cpu: str | None
    cores: int | None
    threads: int
    caches: dict[str, int]  # {l1d_bytes, l2_bytes, l3_bytes}, a level the kernel omits left out


class GuardInfo(TypedDict):
    """The guard that made the manifest (recorded, not pinned)."""

    version: str
    commit: str | None
    dirty: bool | None


class QuantizationPins(TypedDict, total=False):
    """An int8 model's pins (guard.run.int8.int8_pins: those its metadata holds)."""

    source_sha256: str
    profile_sha256: str
    calibration_sha256: str
    method: str


class ManifestPins(TypedDict):
    """A manifest before its sha256 seals it."""

    schema_version: int
    compiler: ComponentPins
    runtime: ComponentPins
    driver: DriverPins
    target: TargetPins
    tuning_cache: TuningCachePins
    model: ModelPins
    host: HostPins
    guard: GuardInfo
    quantization: NotRequired[QuantizationPins]


class ManifestJson(ManifestPins):
    """A manifest (schema_version 1) as written and as load_manifest returns it."""

    sha256: str
