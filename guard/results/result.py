"""One result of the results contract (docs/ARCHITECTURE.md) as a typed record, and its parts.

A result is one (model, backend, target) of a run: its verdict and checks, the manifest it
was built with (guard.results.manifest), its latency statistics, rounds and raw samples, the
measurement's conditions, partitions, arena, numerics, the graph's op counts, the kernels by
time and the counted block (guard.results.counted). Records read leniently and write back
what they read (guard.results.record).

``Result.key`` is the one key of a result, a ``ResultKey``: (model, backend, canonical
target). Every reader pairs results by it: ``guard compare`` and baselines, ``guard ab
--base-ref``, ``guard bump``, the baseline index in MLflow (guard.track.index), shard
plans, ``guard merge`` and ``guard doctor``. The canonical target is
``Result.canonical_target``, the one place it is computed: the manifest's, so two
spellings of one target are one row; a result without a manifest (an error before the
build) has only the suite's spelling, which is then its target. ``key.case`` is the suite's
spelling instead, for the readers that work on the suite's cases rather than on what was
built: a shard plan (every shard must compute the same plan, and ``host`` resolves to each
machine's own CPU, so a plan of canonical targets would differ between two runners),
``guard merge`` (which checks results against that plan), and ``guard doctor`` (which
pairs a base and a head whose resolved target changed, to say how).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from guard.results.counted import Counted
from guard.results.manifest import Manifest
from guard.results.record import Json, Record

Case = tuple[str, str, str]  # (model, backend, target as the suite spelled it)

Verdict = Literal["pass", "fail", "inconclusive", "error"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "inconclusive", "error")
# ``skip`` (not applicable here), ``skipped`` (the counted check without a count),
# ``created`` (a golden created on this run: nothing to compare against yet).
CheckStatus = Literal["pass", "fail", "inconclusive", "skip", "skipped", "created", "error"]
# "measured", or "emulated" (foreign-arch code run under qemu: latency_ms is null)
LatencyStatus = Literal["measured", "emulated"]


@dataclass(frozen=True, kw_only=True)
class Check(Record):
    """One gate: its value, bound, status and one line saying why."""

    name: str | None = None
    status: CheckStatus | None = None
    value: Json = None
    bound: Json = None
    message: str | None = None


@dataclass(frozen=True, kw_only=True)
class Latency(Record):
    """``latency_ms``: statistics of the samples, in ms (``n`` is their count)."""

    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    stdev: float | None = None
    cv: float | None = None
    n: int | None = None


@dataclass(frozen=True, kw_only=True)
class Round(Record):
    """One round: a freshly loaded session's samples and what the machine did meanwhile."""

    samples_ms: tuple[float, ...] = ()
    p50: float | None = None
    n: int | None = None
    warmup_iters: int | None = None
    stopped_by: str | None = None
    contention: float | None = None
    cpu_share: float | None = None
    contended: bool | None = None
    cpu_ms_per_call: float | None = None
    # host-speed probes (guard.measure.host_speed), by guard.results.load.PROBES name
    host_ms: float | None = None
    simd_ms: float | None = None
    host_readings: tuple[tuple[float, ...], ...] = ()

    @property
    def probes(self) -> tuple[float | None, ...]:
        """The host-speed readings in guard.results.load.PROBES order (host_ms, simd_ms)."""
        return (self.host_ms, self.simd_ms)


@dataclass(frozen=True, kw_only=True)
class Measurement(Record):
    """``measurement``: how the samples were taken (or, emulated, why there are none)."""

    warmup_iters: int | None = None
    truncated: bool | None = None
    stopped_by: str | None = None
    contention: float | None = None
    cpu_share: float | None = None
    preempted_fraction: float | None = None
    rounds: int | None = None
    round_isolation: str | None = None
    host_probe: str | None = None
    round_order: str | None = None
    config: Mapping[str, Json] = field(default_factory=dict)
    emulated: bool | None = None
    emulator: str | None = None
    reason: str | None = None
    why_no_rounds: str | None = None  # a reader's reason (a pytest-benchmark summary)


@dataclass(frozen=True, kw_only=True)
class PartitionDetail(Record):
    """One partition: which backend runs which nodes."""

    id: int | None = None
    backend: str | None = None
    provider: str | None = None
    delegated: bool | None = None
    nodes: int | None = None
    first: str | None = None
    last: str | None = None
    ops: Mapping[str, int] = field(default_factory=dict)
    # what a backend reported unsupported here, in whichever shape it has (a list of op
    # types or of {op_type|op}, or {op: count})
    unsupported: Json = None
    unsupported_ops: Json = None
    fallback_ops: Json = None


@dataclass(frozen=True, kw_only=True)
class QuantConversions(Record):
    """``partitions.quant_conversions`` (the bundled partition report's count):
    QuantizeLinear/DequantizeLinear left on activations in the final graph, each a pass
    over its tensor like a relayout."""

    nodes: int | None = None  # Q and DQ nodes, the lowered steps inside fused kernels included
    pairs: int | None = None  # Q nodes whose result only DQs read (a round trip through int8)
    fused: int | None = None  # of ``nodes``, the steps lower_qdq made inside fused kernels


@dataclass(frozen=True, kw_only=True)
class Partitions(Record):
    """``partitions``: the partition count and the nodes delegated or left to fall back."""

    count: int | None = None
    delegated_nodes: int | None = None
    fallback_nodes: int | None = None
    by_provider: Mapping[str, int] = field(default_factory=dict)
    details: tuple[PartitionDetail, ...] = ()
    how: str | None = None
    # per split node: {node, op, backend, declined: {backend: why}} (where a backend says)
    splits: tuple[Mapping[str, Json], ...] | None = None
    # where the backend counts them (bundled); absent in files written before
    quant_conversions: QuantConversions | None = None


@dataclass(frozen=True, kw_only=True)
class Numerics(Record):
    """``numerics``: errors against the golden, output hashes, accuracy."""

    max_abs_err: float | None = None
    max_rel_err: float | None = None
    allclose: bool | None = None
    bit_exact: bool | None = None
    output_sha256: str | None = None
    inputs_sha256: str | None = None
    golden_sha256: str | None = None
    golden_status: str | None = None
    top1: float | None = None
    accuracy: float | None = None
    error: str | None = None
    # encoded output tensors (guard.compare.crossarch.encode_outputs)
    outputs: Json = None
    golden_stale: Json = None  # what changed in the suite's inputs since the golden
    golden_model_changed: bool | None = None
    # the outputs against the suite's test_data output_K.pb (a second golden)
    expected: Numerics | None = None


@dataclass(frozen=True, kw_only=True)
class Pass(Record):
    """One pass of ``graph.passes``: whether it changed the graph (its counts in ``extra``)."""

    name: str | None = None
    changed: bool | None = None
    seconds: float | None = None
    notes: tuple[Json, ...] = ()  # what the pass did where, one line each


@dataclass(frozen=True, kw_only=True)
class Graph(Record):
    """``graph``: op counts before and after optimisation, and the passes that ran."""

    # op type -> count; None where the backend does not say (an empty graph has {})
    ops_before: Mapping[str, int] | None = None
    ops_after: Mapping[str, int] | None = None
    added: Mapping[str, int] | None = None
    removed: Mapping[str, int] | None = None
    passes: tuple[Pass, ...] | None = None  # None where the backend ran no passes
    by_pass: Mapping[str, Mapping[str, Json]] = field(default_factory=dict)
    nodes_before: int | None = None
    nodes_after: int | None = None
    pipeline: str | None = None


@dataclass(frozen=True, kw_only=True)
class BudgetRung(Record):
    """One rung of ``memory.budget.ladder``: the arena after it, what it cost, what it did."""

    rung: int | None = None
    name: str | None = None
    arena_bytes: int | None = None
    latency_cost_pct: float | None = None
    what: str | None = None
    extra_macs_pct: float | None = None
    max_abs_err: float | None = None
    seconds: float | None = None
    quantised: bool | None = None  # rung 5 (int8): its outputs state their error
    max_rel_err: float | None = None  # max abs error / max |fp32 output| (int8 rungs)
    top1_agreement: float | None = None  # a classifier's top-1 against fp32 (int8 rungs)
    spill_bytes: int | None = None  # the spill rung: bytes outside the budget
    spill_traffic_bytes: int | None = None  # and the bytes its copies move per inference


@dataclass(frozen=True, kw_only=True)
class BoundBy(Record):
    """A buffer live at the peak of the smallest reachable plan: what bounds the arena."""

    tensors: tuple[str, ...] = ()
    bytes: int | None = None
    at_node: str | None = None


@dataclass(frozen=True, kw_only=True)
class MemoryBudget(Record):
    """``memory.budget``: options.bundled.memory_budget's ladder (guard.compiler.fit)."""

    bytes: int | None = None
    fits: bool | None = None
    rung: int | None = None
    ladder: tuple[BudgetRung, ...] = ()
    smallest_reachable_bytes: int | None = None
    bound_by: tuple[BoundBy, ...] = ()
    unconstrained_lower_bound_bytes: int | None = None
    search_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Memory(Record):
    """``memory``: how the arena was planned (the backend's own figures)."""

    how: str | None = None
    arena_bytes: int | None = None
    lower_bound_bytes: int | None = None
    strategy: str | None = None
    budget: MemoryBudget | None = None


@dataclass(frozen=True, kw_only=True)
class Kernel(Record):
    """A row of ``kernels``: a generated kernel or a profiled node, its time and share."""

    kernel: str | None = None
    # older spellings of the kernel's name (results written before ``kernel``)
    name: str | None = None
    node: str | None = None
    op: str | None = None
    ms: float | None = None
    share: float | None = None
    nodes: tuple[str, ...] = ()
    provider: str | None = None
    source: str | None = None
    # other profilers' spellings of the time and the share (guard.doctor reads them all)
    time_ms: float | None = None
    mean_ms: float | None = None
    us: float | None = None
    time_us: float | None = None
    seconds: float | None = None
    s: float | None = None
    fraction: float | None = None
    pct: float | None = None

    @property
    def label(self) -> str | None:
        """The kernel's name, whichever spelling the row has."""
        return self.kernel or self.name or self.node

    @property
    def time(self) -> float | None:
        """Milliseconds per inference, whichever unit the row has."""
        for value, scale in ((self.ms, 1.0), (self.time_ms, 1.0), (self.mean_ms, 1.0),
                             (self.us, 1e-3), (self.time_us, 1e-3), (self.seconds, 1e3),
                             (self.s, 1e3)):  # fmt: skip
            if value is not None:
                return float(value) * scale
        return None

    @property
    def fraction_of_total(self) -> float | None:
        """The share of the inference's time (0..1), whichever spelling the row has."""
        for value in (self.share, self.fraction):
            if value is not None:
                return float(value)
        return float(self.pct) / 100 if self.pct is not None else None


@dataclass(frozen=True, kw_only=True)
class Preflight(Record):
    """``preflight``: the machine as the measurement found it, and what it warned about."""

    loadavg: Mapping[str, float] = field(default_factory=dict)
    governor: Json = None
    affinity: tuple[int, ...] = ()
    cores: int | None = None
    threads: int | None = None
    contention: float | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Contention(Record):
    """``contention``: whether other processes loaded the machine while this result ran."""

    flagged: bool | None = None
    rounds_flagged: int | None = None
    rounds: int | None = None
    load_max: float | None = None
    cpu_share_min: float | None = None
    load_threshold: float | None = None
    cpu_share_threshold: float | None = None


@dataclass(frozen=True, kw_only=True)
class WorstTensor(Record):
    """One row of ``quantization.worst_tensors``: a tensor's SQNR against fp32."""

    tensor: str | None = None
    node: str | None = None
    sqnr_db: float | None = None


@dataclass(frozen=True, kw_only=True)
class Quantization(Record):
    """``quantization``: an int8 row judged against its fp32 source (guard.run.int8)."""

    source_sha256: str | None = None
    profile_sha256: str | None = None
    calibration_sha256: str | None = None
    method: str | None = None
    sqnr_db: float | None = None
    top1_agreement: float | None = None
    samples: int | None = None
    worst_tensors: tuple[WorstTensor, ...] = ()
    top1_fp32: float | None = None
    top1_int8: float | None = None
    top1_drop: float | None = None


@dataclass(frozen=True, kw_only=True)
class Tuning(Record):
    """``tuning``: a backend's own tuning figures (older results)."""

    hit_rate: float | None = None


@dataclass(frozen=True, kw_only=True)
class Result(Record):
    """One result of the results contract, in the order guard writes its keys."""

    model: str = ""
    backend: str = ""
    target: str = ""  # as the suite spelled it; the canonical one is ``canonical_target``
    verdict: Verdict | None = None
    checks: tuple[Check, ...] = ()
    error: str | None = None
    error_kind: str | None = None
    manifest: Manifest = field(default_factory=Manifest)
    latency_ms: Latency | None = None
    latency_status: LatencyStatus | None = None
    # validated finite latencies in a loaded file (guard.results.load); None marks an item
    # that is not a number in a document read as it comes
    samples_ms: tuple[float | None, ...] = ()
    rounds: tuple[Round, ...] = ()
    noise_pct: float | None = None  # between-round spread: 100 x SD of the rounds' log medians
    measurement: Measurement = field(default_factory=Measurement)
    partitions: Partitions | None = None
    arena_bytes: int | None = None
    arena_lower_bound_bytes: int | None = None
    memory: Memory = field(default_factory=Memory)
    numerics: Numerics = field(default_factory=Numerics)
    preflight: Preflight = field(default_factory=Preflight)
    artefact: str | None = None
    artefact_reused: bool | None = None
    graph: Graph | None = None
    # what other parts of guard add after the contract's keys
    layout_conversions: int | None = None
    contention: Contention = field(default_factory=Contention)
    kernels: tuple[Kernel, ...] = ()
    counted: Counted | None = None
    quantization: Quantization | None = None
    duration_s: float | None = None
    tuning: Tuning = field(default_factory=Tuning)
    session_options: Mapping[str, Json] = field(default_factory=dict)  # a runtime's own
    # when this result's build and measurement ran, where the run recorded it
    started: str | None = None
    finished: str | None = None

    @property
    def canonical_target(self) -> str:
        """The target the artefact was built for (``manifest.target.canonical``), or the
        suite's spelling where there is no manifest (an error before the build). The one
        place guard computes it."""
        return self.manifest.target.canonical or self.target

    @property
    def key(self) -> ResultKey:
        """(model, backend, canonical target): what every reader pairs results by."""
        return ResultKey(self.model, self.backend, self.canonical_target, self.target)

    def check(self, name: str) -> Check | None:
        """The first check called ``name``, or None."""
        return next((c for c in self.checks if c.name == name), None)


@dataclass(frozen=True)
class ResultKey:
    """(model, backend, canonical target); ``written`` is the target as the suite spelled it."""

    model: str
    backend: str
    target: str
    written: str = field(default="", compare=False)

    @classmethod
    def of(cls, result: Result | Mapping[str, Json]) -> ResultKey:
        """The key of a result (a record, or a result object of the results contract)."""
        if isinstance(result, Mapping):
            result = Result.from_json(dict(result))
        return result.key

    @property
    def case(self) -> Case:
        """(model, backend, target as the suite spelled it): a case of the suite."""
        return (self.model, self.backend, self.written)

    def __str__(self) -> str:
        return f"{self.model}/{self.backend}/{self.target}"
