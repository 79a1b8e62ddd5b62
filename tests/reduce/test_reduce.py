"""guard reduce: ddmin over connected subgraphs, cuts fed from recorded tensors, bundles."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import yaml
from reduce_fixtures import (
    NATIVE_WITHOUT_LRN,
    MiscompilingBundled,
    _Session,
    fifty_node_model,
    lrn_net,
    write_suite,
)

from guard.backends.bundled import BundledBackend
from guard.cli.main import main
from guard.compiler.runtime.engine import reference_executor
from guard.reduce import NotReproduced, reduce_model
from guard.reduce.ddmin import ddmin
from guard.reduce.oracle import AccuracyOracle, Builder
from guard.reduce.subgraph import ModelGraph, cut, record_intermediates
from guard.suite import load_suite

# -- ddmin and cuts ---------------------------------------------------------------------------


def test_ddmin_finds_the_connected_pair_in_a_chain() -> None:
    chain = list(range(20))

    def components(nodes: Any) -> list[list[int]]:
        out: list[list[int]] = []
        for n in sorted(nodes):
            if out and out[-1][-1] == n - 1:
                out[-1].append(n)
            else:
                out.append([n])
        return out

    tested: list[list[int]] = []

    def fails(nodes: list[int]) -> bool:
        tested.append(nodes)
        return 7 in nodes and 8 in nodes

    red = ddmin(chain, fails, components)
    assert red.nodes == [7, 8] and red.minimal
    assert all(components(t) == [t] for t in tested)  # only connected sets are tested
    capped = ddmin(chain, fails, components, max_tests=2)
    assert not capped.minimal and 7 in capped.nodes and 8 in capped.nodes


def test_a_cut_is_fed_from_recorded_tensors_and_matches_the_full_model() -> None:
    m = fifty_node_model()
    mg = ModelGraph.of(m)
    x = np.random.default_rng(3).standard_normal((1, 24)).astype(np.float32)
    values = record_intermediates(m, {"x": x})
    c = cut(mg, list(range(10, 20)), values)
    assert [n.name for n in c.model.graph.node] == [m.graph.node[i].name for i in range(10, 20)]
    onnx.checker.check_model(c.model)
    # Weights stay initializers (constants), activations become inputs.
    assert set(c.feeds) == {i.name for i in c.model.graph.input}
    assert not set(c.feeds) & {t.name for t in c.model.graph.initializer}
    from guard.backends.onnxruntime import reference_session

    tmp = Path(__file__).parent / ".cut-test.onnx"
    try:
        onnx.save(c.model, str(tmp))
        outs = reference_session(tmp).run(None, c.feeds)
    finally:
        tmp.unlink(missing_ok=True)
    for o, got in zip(c.model.graph.output, outs, strict=True):
        np.testing.assert_allclose(got, values[o.name], rtol=1e-6, atol=1e-6)


# -- accuracy: a miscompiled node -------------------------------------------------------------


@pytest.mark.slow  # ~7 s: ten cuts through the code generator, then a guard run
def test_reduce_shrinks_50_nodes_with_one_miscompiled_node_to_at_most_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # guard run keeps its artefacts under ./.guard
    # The suite's entry names another model; MODEL (model_file) is the one reduced.
    suite = write_suite(tmp_path / "s", fifty_node_model(softmax=False))
    onnx.save(fifty_node_model(), str(tmp_path / "fifty.onnx"))
    bad = MiscompilingBundled("Softmax")
    lines: list[str] = []
    s = reduce_model(
        suite,
        "net",
        mode="accuracy",
        backend=bad,
        out=tmp_path / "bundle",
        model_file=str(tmp_path / "fifty.onnx"),
        progress=lines.append,
    )
    assert any("still fails" in ln for ln in lines)
    assert s["nodes_before"] == 50
    assert s["nodes_after"] <= 3
    assert "Softmax" in [k["op"] for k in s["kept"]]
    out = Path(s["bundle"])
    for f in ("model.onnx", "inputs.npz", "suite.yaml", "README.md", "reduce.json"):
        assert (out / f).is_file(), f
    readme = (out / "README.md").read_text()
    assert "50 nodes" in readme and f"**{s['nodes_after']}**" in readme
    assert "max abs err" in readme
    # The bundle's suite reproduces it: the same miscompiling backend fails its tolerance
    # against the bundle's golden, fed with the bundle's inputs...
    b_suite = load_suite(out / "suite.yaml")
    entry = b_suite.models[0]
    feeds = dict(np.load(out / "inputs.npz"))
    from guard.golden import compare_outputs
    from guard.golden.produce import golden_store

    golden = golden_store(b_suite).load(entry.name)
    assert golden is not None and set(golden.inputs) == set(feeds)
    sess = Builder(entry, "bundled", tmp_path / "w", bad).session(out / "model.onnx", feeds)[0]
    num = compare_outputs(sess.run(feeds), golden.output_list, rtol=1e-4, atol=1e-5)
    assert not num["allclose"]
    # ...and `guard run` of the bundle with the real (correct) compiler passes it.
    assert (
        main(["run", str(out / "suite.yaml"), "--no-track", "--json", str(tmp_path / "r.json")])
        == 0
    )
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    assert r["numerics"]["golden_status"] == "compared"


def test_a_problem_the_full_model_does_not_show_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    suite = write_suite(tmp_path / "s", fifty_node_model())
    with pytest.raises(NotReproduced, match="does not show the problem"):
        reduce_model(suite, "net", mode="accuracy", out=tmp_path / "bundle")
    assert not (tmp_path / "bundle").exists()
    rc = main(
        [
            "reduce",
            "--suite",
            str(suite),
            "--model",
            "net",
            "--accuracy",
            "--out",
            str(tmp_path / "bundle"),
        ]
    )
    assert rc == 1 and not (tmp_path / "bundle").exists()
    err = capsys.readouterr().err
    assert "nothing written" in err and "Traceback" not in err


def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    suite = write_suite(tmp_path / "s", fifty_node_model())
    assert main(["reduce", "--suite", str(suite), "--model", "nope", "--accuracy"]) == 2
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("")
    assert (
        main(["reduce", "--suite", str(suite), "--model", "net", "--accuracy", "--out", str(full)])
        == 2
    )
    assert (
        main(
            [
                "reduce",
                "--suite",
                str(suite),
                "--model",
                "net",
                "--latency",
                str(tmp_path / "missing.yaml"),
            ]
        )
        == 2
    )
    # --latency takes a suite variant file or another backend's name, nothing else.
    assert main(["reduce", "--suite", str(suite), "--model", "net", "--latency", "bundled"]) == 2
    assert main(["reduce", "--suite", str(suite), "--model", "net", "--latency", "tpu"]) == 2
    assert (
        main(
            [
                "reduce",
                "--suite",
                str(suite),
                "--model",
                "net",
                "--accuracy",
                "--json",
                str(tmp_path / "no" / "s.json"),
            ]
        )
        == 2
    )
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("guard: error")]
    assert len(lines) == 6
    assert "the head runs on bundled too" in lines[3]
    assert "neither a suite file nor a backend name" in lines[4]


# -- partitions: an op the native backend declines (the done-when path) -----------------------


@pytest.mark.slow
def test_reduce_of_a_declined_op_bundles_a_suite_that_fails_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # guard run keeps its artefacts under ./.guard
    d = tmp_path / "s"
    d.mkdir()
    (d / "native-no-lrn.yaml").write_text(yaml.safe_dump(NATIVE_WITHOUT_LRN))
    suite = write_suite(
        d, lrn_net(), profile="native-no-lrn.yaml", checks={"partitions": {"max": 1}}
    )
    out = tmp_path / "bundle"
    assert (
        main(
            [
                "reduce",
                "--suite",
                str(suite),
                "--model",
                "net",
                "--partitions",
                "--out",
                str(out),
                "--json",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["schema_version"] == 1 and s["nodes_after"] <= 3
    assert "LRN" in [k["op"] for k in s["kept"]]
    assert s["reduced"]["detail"]["culprits"][0]["node"] == "lrn_mid"
    # The profile travels with the bundle; `guard run` of it fails the same way.
    assert (out / "native-no-lrn.yaml").is_file()
    assert (
        main(["run", str(out / "suite.yaml"), "--no-track", "--json", str(tmp_path / "r.json")])
        == 1
    )
    r = json.loads((tmp_path / "r.json").read_text())["results"][0]
    failed = [c["name"] for c in r["checks"] if c["status"] == "fail"]
    assert failed == ["partitions"]


# -- latency: one node made slow --------------------------------------------------------------


class _SlowBundled(BundledBackend):
    """The real compiler; its native partitions run through an executor hook that sleeps
    in one op (a slow kernel). The base is the same hook without the sleep."""

    def __init__(self, op: str, sleep_s: float) -> None:
        self.op, self.sleep_s = op, sleep_s

    def load(self, artefact_dir: Path, threads: int) -> _Session:  # type: ignore[override]
        def execute(o: str, inputs: Any, attrs: dict[str, Any]) -> list[np.ndarray]:
            if o == self.op and self.sleep_s:
                time.sleep(self.sleep_s)
            return reference_executor(o, inputs, attrs)

        return _Session(Path(artefact_dir), {"native": execute})


def test_the_latency_base_is_a_suite_variant_or_another_backend(tmp_path: Path) -> None:
    from guard.reduce.reduce import _latency_base

    suite = write_suite(tmp_path / "s", fifty_node_model())
    entry = load_suite(suite).models[0]
    assert _latency_base("onnxruntime", entry, "bundled") == (entry, "onnxruntime")
    variant = write_suite(
        tmp_path / "v", fifty_node_model(), options={"bundled": {"pipeline": "O1"}}
    )
    base_entry, name = _latency_base(variant, entry, "bundled")
    assert name == "bundled" and base_entry.options == {"bundled": {"pipeline": "O1"}}


@pytest.mark.slow
def test_latency_reduce_keeps_the_slow_node(tmp_path: Path) -> None:
    suite = write_suite(tmp_path / "s", fifty_node_model())
    s = reduce_model(
        suite,
        "net",
        mode="latency",
        latency_base=suite,
        backend=_SlowBundled("Softmax", 0.003),
        base_backend=_SlowBundled("Softmax", 0.0),
        out=tmp_path / "bundle",
        regress_pct=20,
        budget_s=0.6,
    )
    assert "Softmax" in [k["op"] for k in s["kept"]] and s["nodes_after"] <= 3
    assert s["reduced"]["detail"]["verdict"] == "regressed"
    assert (Path(s["bundle"]) / "base.yaml").is_file()
    assert "guard ab suite.yaml --base base.yaml" in (Path(s["bundle"]) / "README.md").read_text()


def test_accuracy_oracle_uses_the_entry_tolerance(tmp_path: Path) -> None:
    suite = write_suite(
        tmp_path / "s", fifty_node_model(), checks={"tolerance": {"rtol": 0.5, "atol": 0.5}}
    )
    entry = load_suite(suite).models[0]
    o = AccuracyOracle(Builder(entry, "bundled", tmp_path / "w", MiscompilingBundled("Softmax")))
    assert o.tol == {"rtol": 0.5, "atol": 0.5}
    x = {"x": np.zeros((1, 24), np.float32)}
    assert not o.observe(tmp_path / "s" / "net.onnx", x).fails  # within a loose tolerance


def test_dead_outputs_and_initializers_listed_as_inputs() -> None:
    """A Dropout's unread mask is not a cut output; IR<4 weights listed as graph inputs
    stay initializers (guard never feeds them)."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
            helper.make_node("Dropout", ["a"], ["d", "mask"], name="drop"),
            helper.make_node("Relu", ["d"], ["y"], name="relu"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    m.ir_version = 6
    mg = ModelGraph.of(m)
    assert "w" in mg.constant and mg.compute == [0, 1, 2]
    values = record_intermediates(m, {"x": np.ones((1, 4), np.float32)})
    c = cut(mg, [0, 1], values)
    assert [o.name for o in c.model.graph.output] == ["d"]
    assert [i.name for i in c.model.graph.input] == ["x"]
    assert [t.name for t in c.model.graph.initializer] == ["w"]


def test_a_subgraph_capture_is_a_read_of_its_node() -> None:
    """An If whose branches read an outer tensor: the cut feeds that tensor too."""
    from onnx import TensorProto, helper

    def branch(name: str, op: str) -> onnx.GraphProto:
        return helper.make_graph(
            [helper.make_node(op, ["a"], [f"{name}_out"])],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1, 4])],
        )

    g = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="relu"),
            helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
            helper.make_node(
                "If",
                ["c"],
                ["y"],
                name="if",
                then_branch=branch("t", "Neg"),
                else_branch=branch("e", "Abs"),
            ),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    mg = ModelGraph.of(m)
    assert mg.neighbours(3) == {0, 2}  # the If reads c and, through its branches, a
    values = record_intermediates(m, {"x": np.arange(4, dtype=np.float32).reshape(1, 4)})
    c = cut(mg, [3], values)
    assert sorted(i.name for i in c.model.graph.input) == ["a", "c"]
    onnx.checker.check_model(c.model)


def test_shape_chains_are_constants_of_the_binding() -> None:
    """x -> Shape -> Gather -> Unsqueeze -> Concat -> Reshape(x): with every dim bound, the
    shape chain is folded into an initializer; only Reshape and Relu are compute nodes."""
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["shp"], name="shape"),
            helper.make_node("Gather", ["shp", "zero"], ["n"], name="gather", axis=0),
            helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsq"),
            helper.make_node("Concat", ["n1", "minus1"], ["newshape"], name="cat", axis=0),
            helper.make_node("Reshape", ["x", "newshape"], ["r"], name="reshape"),
            helper.make_node("Relu", ["r"], ["y"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        ],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    mg = ModelGraph.of(m)
    assert mg.compute == [4, 5] and "newshape" in mg.constant
    values = record_intermediates(m, {"x": np.ones((2, 3, 4), np.float32)})
    c = cut(mg, [4, 5], values)
    assert [i.name for i in c.model.graph.input] == ["x"]
    assert [t.name for t in c.model.graph.initializer] == ["newshape"]
    np.testing.assert_array_equal(numpy_helper.to_array(c.model.graph.initializer[0]), [2, -1])
