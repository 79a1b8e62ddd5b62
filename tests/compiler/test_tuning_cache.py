"""The bundled tuning cache file: keys, differences, validation, locked merge, budget."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp

import numpy as np
import pytest

from guard.compiler.codegen.conv.schedule import ConvSchedule
from guard.compiler.codegen.gemm.driver import GemmSchedule
from guard.compiler.tuning import schedule_json
from guard.compiler.tuning.cache import CacheError, Entry, load, merge_into
from guard.compiler.tuning.keys import TaskKey, differences, nearest
from guard.compiler.tuning.tune import MIN_SHARE, Measured, Task, allocate, choose

T16 = "llvm -mattr=+avx,+avx2,+avx512f,+fma -mcpu=znver4 -mtriple=x86_64-linux-gnu"


def key(m: int = 128, target: str = T16, compiler: str = "0.1.0", op: str = "gemm") -> TaskKey:
    shape = (("M", m), ("N", 64), ("K", 32), ("batch", 1), ("trans_a", 0), ("trans_b", 0))
    return TaskKey(op, shape, "float32", target, compiler)


def entry(k: TaskKey, t: float = 1e-5) -> Entry:
    s = GemmSchedule(mr=6, nr=32, kc=32, mc=132, nc=64)
    return Entry(k, s, t, s, t * 1.5, {"measured": {"reps": 7}})


def test_differences_name_the_part_that_changed():
    assert differences(key(127), key(128)) == ["shape differs: dim 0 (M) 127 vs 128"]
    sve = "llvm -mattr=+neon,+sve -mtriple=aarch64-linux-gnu"
    neon = "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"
    assert differences(key(target=sve), key(target=neon)) == ["target differs: +sve added"]
    assert differences(key(compiler="0.2.0"), key()) == ["compiler 0.2.0 vs 0.1.0"]
    assert differences(key(), key()) == []


def test_nearest_prefers_fewest_differences_then_closest_shape():
    keys = [key(64), key(120), key(128, compiler="0.0.9"), key(128, op="conv")]
    assert nearest(key(127), keys) == key(120)
    assert nearest(key(128), keys) == key(128, compiler="0.0.9")
    assert nearest(key(), []) is None


def test_merge_writes_a_versioned_file_that_loads_back(tmp_path):
    p = tmp_path / "c.json"
    cache = merge_into(p, [entry(key(1)), entry(key(2))])
    doc = json.loads(p.read_text())
    assert doc["schema_version"] == 1 and len(doc["entries"]) == 2
    row = doc["entries"][0]
    for f in ("key", "schedule", "time_s", "default_schedule", "default_time_s", "compiler"):
        assert f in row
    back = load(p)
    assert back.sha256 == cache.sha256 and len(back) == 2
    assert back.get(key(1)).schedule == GemmSchedule(mr=6, nr=32, kc=32, mc=132, nc=64)
    # A re-measured key replaces the old entry; others stay.
    merge_into(p, [entry(key(1), 2e-5)])
    assert load(p).get(key(1)).time_s == 2e-5 and len(load(p)) == 2


def _edit(p, fn) -> None:
    doc = json.loads(p.read_text())
    fn(doc)
    p.write_text(json.dumps(doc))


def test_a_hand_edit_is_refused_by_its_hash(tmp_path):
    p = tmp_path / "c.json"
    merge_into(p, [entry(key(1))])
    _edit(p, lambda d: d["entries"][0]["schedule"].update(mr=4))
    with pytest.raises(CacheError, match=r"entries_sha256 does not match"):
        load(p)


def test_the_first_bad_entry_is_named(tmp_path):
    from guard.compiler.tuning.cache import entries_sha256

    p = tmp_path / "c.json"
    merge_into(p, [entry(key(1)), entry(key(2))])

    def bad(d):
        d["entries"][1]["schedule"]["nr"] = 20  # not a multiple of the vector width
        d["entries_sha256"] = entries_sha256(d["entries"])  # consistent hash: a damaged tool

    _edit(p, bad)
    with pytest.raises(CacheError, match=r"entry 1 \(gemm float32 \[M=2.*nr=20 must be"):
        load(p)

    def key_mismatch(d):
        d["entries"][0]["shape"][0][1] = 7
        d["entries_sha256"] = entries_sha256(d["entries"])

    merge_into(tmp_path / "d.json", [entry(key(1))])
    _edit(tmp_path / "d.json", key_mismatch)
    with pytest.raises(CacheError, match=r"entry 0 .*key does not match its fields"):
        load(tmp_path / "d.json")


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "is not JSON"),
        ('{"kind": "x"}', "not a guard bundled tuning cache"),
        ('{"kind": "guard-bundled-tuning-cache", "schema_version": 9, "entries": []}',
         r"schema_version: unsupported version 9 \(this guard reads tuning cache schema_version 1\)"
         r"\. Upgrade guard"),
    ],
)  # fmt: skip
def test_corrupt_and_newer_caches_are_one_line(tmp_path, text, match):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(CacheError, match=match) as exc:
        load(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


def _writer(path: str, first: int) -> None:
    merge_into(path, [entry(key(first + i)) for i in range(20)])


def test_two_concurrent_writers_lose_no_entries(tmp_path):
    p = str(tmp_path / "c.json")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(p, base)) for base in (1000, 2000, 3000)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join(60)
        assert pr.exitcode == 0
    assert len(load(p)) == 60


def test_conv_schedule_is_validated_and_old_entries_still_load():
    ConvSchedule(14).validate(16)
    with pytest.raises(ValueError, match="ow_block=31"):
        ConvSchedule(31).validate(16)
    target = "llvm -mcpu=skylake-avx512 -mtriple=x86_64-linux-gnu"
    # an entry tuned when ow_block was the only knob means what it meant then
    assert schedule_json.from_dict("conv", {"ow_block": 12}, target) == ConvSchedule(
        ow_block=12, oc_block=1, unroll=1, loop_order="kv_oh"
    )
    full = ConvSchedule(ow_block=7, oc_block=3, unroll=2, loop_order="oh_kv")
    assert schedule_json.from_dict("conv", schedule_json.to_dict(full), target) == full
    with pytest.raises(ValueError, match="spills"):
        schedule_json.from_dict("conv", {"ow_block": 14, "oc_block": 3}, target)


def _task(name: str, flops: int, count: int = 1) -> Task:
    return Task(key(len(name)), None, count, flops, None)


def test_budget_follows_flop_share_and_small_tasks_get_the_floor():
    tasks = [_task("a", 60), _task("bb", 30, 1), _task("ccc", 1)]  # ccc: 1/91 < MIN_SHARE
    assert 1 / 91 < MIN_SHARE
    share = allocate(tasks, 90.0)
    assert share[tasks[0].key.text] == pytest.approx(60.0)
    assert share[tasks[1].key.text] == pytest.approx(30.0)
    assert share[tasks[2].key.text] == 0.0


def test_a_candidate_must_beat_the_default_by_the_margin():
    d = Measured("default", [1.0, 1.0, 1.0])
    close = Measured("close", [0.99, 0.99, 0.99])
    assert choose([d, close]) == (d, d)
    fast = Measured("fast", [0.5, 0.6, 0.5])
    assert choose([d, close, fast]) == (fast, d)
    # Fast median, but slower than the default in 2 of 4 side-by-side rounds: not a winner.
    d4 = Measured("default", [1.0, 1.0, 0.4, 0.4])
    lucky = Measured("lucky", [0.3, 0.3, 0.5, 0.5])
    assert choose([d4, lucky]) == (d4, d4)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_measure_interleaves_discards_warmup_and_respects_the_deadline():
    from guard.compiler.tuning.tune import WARMUP_ROUNDS, measure

    clock = _Clock()
    cost = {"default": 2**-10, "a": 2**-11, "b": 2**-9}  # seconds per call, exact in binary
    calls: list[str] = []

    class Fake:
        def __init__(self, task, schedule, target, rng) -> None:
            self.s, self.compile_s = schedule, 0.5
            clock.t += 0.5  # compiling takes half a second of the budget

        def call(self, times: int) -> None:
            calls.append(self.s)
            clock.t += cost[self.s] * times

    res = measure(None, ["default", "a", "b"], None, reps=4, clock=clock, compile_one=Fake)
    assert [m.schedule for m in res] == ["default", "a", "b"]
    for m in res:
        assert m.samples == [cost[m.schedule]] * 4  # warm-up rounds not kept
    timed = calls[3:]  # after one probe call each
    assert len(timed) == 3 * (WARMUP_ROUNDS + 4)
    assert timed[:3] == ["default", "a", "b"] and timed[3:6] == ["b", "a", "default"]
    # A deadline passed after the first compile keeps only the default.
    clock.t = 0.0
    res = measure(None, ["default", "a", "b"], None, reps=2, clock=clock, compile_one=Fake,
                  deadline=0.25)  # fmt: skip
    assert [m.schedule for m in res] == ["default"]


def test_the_budget_holds_measuring_included():
    """Issue 28 item 8: guard tune --budget-s 30 took 46 s; the deadline stopped only the
    compiling, and every candidate built was then timed past it. On a fake clock (a compile
    is 0.5 s, a call 2**-10 s) three tasks and 64 candidates each stay within 6 s."""
    from guard.compiler.tuning.tune import tune_tasks

    clock = _Clock()

    class Fake:
        def __init__(self, task, schedule, target, rng) -> None:
            self.compile_s = 0.5
            clock.t += 0.5

        def call(self, times: int) -> None:
            clock.t += 2**-10 * times

    @dataclasses.dataclass(frozen=True)
    class Schedule:  # a candidate schedule (the log prints it as a dict)
        i: int

    def propose(task, limit):
        return [Schedule(i) for i in range(limit)]

    tasks = [_task("a", 60), _task("bb", 30, 1), _task("ccc", 10)]
    lines: list[str] = []
    entries = tune_tasks(tasks, None, 6.0, reps=4, clock=clock, timer=clock, log=lines.append,
                         propose=propose, compile_one=Fake)  # fmt: skip
    assert clock.t <= 6.0, clock.t
    assert len(entries) == 3 and all(e.extra["measured"]["candidates"] >= 1 for e in entries)
    # A budget spent before the last task: it keeps the default, and the log says so.
    clock.t, lines = 0.0, []
    entries = tune_tasks(tasks, None, 1.2, reps=4, clock=clock, timer=clock, log=lines.append,
                         propose=propose, compile_one=Fake)  # fmt: skip
    assert len(entries) < 3 and any("budget of 1.2 s spent" in line for line in lines)


@pytest.mark.parametrize("value", ["5", "''", "[a]"])
def test_suite_refuses_a_tuning_cache_that_is_not_a_path(tmp_path, value):
    from guard.core.errors import SuiteError
    from guard.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text("schema_version: 1\nsuite: x\ndefaults:\n"
                 f"  options: {{bundled: {{tuning_cache: {value}}}}}\n"
                 "models:\n  - {name: m, source: zoo:mlp}\n")  # fmt: skip
    with pytest.raises(SuiteError, match=r"options\.bundled\.tuning_cache: expected a path"):
        load_suite(p)


def _suite(tmp_path, options: str, target: str = "host"):
    p = tmp_path / "s.yaml"
    p.write_text("schema_version: 1\nsuite: x\ndefaults:\n  backends: [bundled]\n"
                 f"  target: {json.dumps(target)}\n{options}"
                 "models:\n  - {name: m, source: zoo:mlp}\n")  # fmt: skip
    return p


def test_tune_without_a_cache_path_or_for_a_foreign_target_is_exit_2(tmp_path, capsys):
    from guard.cli.main import main

    assert main(["tune", str(_suite(tmp_path, ""))]) == 2
    err = capsys.readouterr().err
    assert "has no options.bundled.tuning_cache" in err and "Traceback" not in err
    arm = _suite(tmp_path, "  options: {bundled: {tuning_cache: c.json}}\n",
                 "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+sve")  # fmt: skip
    assert main(["tune", str(arm)]) == 2
    err = capsys.readouterr().err
    assert "cannot tune for target" in err and "aarch64" in err
    assert not (tmp_path / "c.json").exists()


def test_miss_warning_names_only_what_differs(tmp_path):
    """The warning shows the shape and the differing attribute, not the ~350-character
    target; the full keys stay in the summary's ``missed`` records."""
    from guard.compiler.tuning.dispatch import Dispatch

    cache = merge_into(tmp_path / "c.json", [entry(key())])
    d = Dispatch(cache, T16.replace(",+fma", ""), "0.1.0")
    d.choose(d.key("gemm", list(key().shape)), None)
    with pytest.warns(UserWarning) as rec:
        d.warn_misses("c.json")
    msg = str(rec[0].message)
    assert "target differs: +fma removed" in msg
    assert "-mcpu=znver4" not in msg and "gemm float32 [M=128," in msg
    (missed,) = d.summary()["missed"]
    assert missed["key"].endswith(f"target={T16.replace(',+fma', '')} compiler=0.1.0")


def test_kernel_speedup_is_weighted_by_runtime_share(tmp_path):
    """Two hit tasks: one run 10 times at 1.0x, one once at 3.0x. Weighted by count x
    time the model's tuned kernels are (10*2 + 1*3) / (10*2 + 1*1) = 1.095x faster,
    not the 2.0x an unweighted mean of the two speedups would claim."""
    from guard.compiler.tuning.dispatch import Dispatch, weighted_speedup

    s = GemmSchedule(mr=6, nr=32, kc=32, mc=132, nc=64)
    common = Entry(key(1), s, 2.0, s, 2.0, {"measured": {"count": 10}})
    rare = Entry(key(2), s, 1.0, s, 3.0, {"measured": {"count": 1}})
    assert weighted_speedup([common, rare]) == round(23 / 21, 3)
    cache = merge_into(tmp_path / "c.json", [common, rare])
    d = Dispatch(cache, T16, "0.1.0")
    for k in (key(1), key(2)):
        d.choose(k, None)
    assert d.summary()["kernel_speedup"] == round(23 / 21, 3)


@pytest.mark.parametrize("m", [128, 512], ids=["one-call", "split-into-row-tasks"])
def test_a_build_looks_up_exactly_the_kernels_it_emits(tmp_path, m):
    """A cache holding every task the tuner extracts is hit by every look-up of the build
    and missed by none: the thread split's what-if questions (may the 8-row task kernel
    take B packed as the whole GEMM's?) are not look-ups. Before, a 128-row GEMM that
    stays one call counted a miss for an 8-row kernel that was never emitted."""
    import onnx
    from onnx import helper, numpy_helper

    from guard.compiler import import_onnx, optimize
    from guard.compiler.codegen.build import jit
    from guard.compiler.partition.plan import plan
    from guard.compiler.tuning.dispatch import Dispatch, applied
    from guard.compiler.tuning.tune import extract_tasks
    from guard.manifest import canonicalize

    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((256, 256)) * 0.1)
                                .astype(np.float32), "w")  # fmt: skip
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [m, 256])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [m, 256])], [w],
    )  # fmt: skip
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    target = canonicalize("host")
    tasks = extract_tasks(path, {"x": [m, 256]}, target, "0.1.0")
    cache = merge_into(
        tmp_path / "c.json", [Entry(t.key, t.default, 1e-5, t.default, 1e-5) for t in tasks]
    )
    d = Dispatch(cache, target, "0.1.0")
    optimised, _ = optimize(import_onnx(path, {"x": [m, 256]}), "O2")
    with applied(d):
        jit(plan(optimised))
    assert (d.hits, d.misses) == (len(tasks), 0), d.summary()["missed"]


def test_a_tuned_row_task_with_another_panel_width_keeps_the_output_right(tmp_path):
    """B is packed once, in the whole GEMM's panel width (``nr``), and read by every row
    task: a cache entry that gives the tasks another ``nr`` must not make them read B in
    the wrong layout. Either the split goes or the tasks keep the packed width; the output
    is the product either way."""
    import dataclasses

    import onnx
    from onnx import helper, numpy_helper

    from guard.compiler import import_onnx, optimize
    from guard.compiler.codegen.build import jit
    from guard.compiler.partition.plan import plan
    from guard.compiler.tuning.dispatch import Dispatch, applied
    from guard.compiler.tuning.tune import extract_tasks
    from guard.manifest import canonicalize

    rng = np.random.default_rng(0)
    wv = (rng.standard_normal((256, 256)) * 0.1).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [512, 256])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [512, 256])],
        [numpy_helper.from_array(wv, "w")],
    )  # fmt: skip
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    target = canonicalize("host")
    (task,) = extract_tasks(path, {"x": [512, 256]}, target, "0.1.0")
    other = dataclasses.replace(task.default, nr=task.default.nr // 2, nc=task.default.nr // 2)
    cache = merge_into(tmp_path / "c.json", [Entry(task.key, other, 1e-5, task.default, 2e-5)])
    optimised, _ = optimize(import_onnx(path, {"x": [512, 256]}), "O2")
    with applied(Dispatch(cache, target, "0.1.0")):
        rt, _ = jit(plan(optimised))
    x = rng.standard_normal((512, 256)).astype(np.float32)
    np.testing.assert_allclose(rt.run({"x": x})["y"], x @ wv, rtol=1e-4, atol=1e-4)


def test_the_tuner_keeps_a_row_task_in_the_packed_panel_width(tmp_path):
    """The row tasks of a split GEMM read B packed for the whole GEMM: the tuner only
    offers them schedules of that panel width, so a tuned task keeps its split."""
    import onnx
    from onnx import helper, numpy_helper

    from guard.compiler.tuning.tune import candidates, extract_tasks
    from guard.manifest import canonicalize

    w = numpy_helper.from_array(np.zeros((256, 256), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [512, 256])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [512, 256])], [w],
    )  # fmt: skip
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    (task,) = extract_tasks(path, {"x": [512, 256]}, canonicalize("host"), "0.1.0")
    assert task.shape.M < 512  # a row task, not the whole GEMM
    offered = candidates(task, 40)
    assert len(offered) > 1 and {s.nr for s in offered} == {task.default.nr}
