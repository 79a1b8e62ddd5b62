"""Real inputs: .npy, .npz and TensorProto files, and the ONNX test-data layout whose
output_K.pb become a second golden (the ``expected`` check)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from run_helpers import FAST_MEASURE, write_suite

from guard.cli.main import main
from guard.core.errors import ModelError
from guard.suite import load_suite
from guard.suite.model import bind, load_model, make_inputs


def mlp(path: Path) -> Path:
    """x [N, 8] -> MatMul -> Add -> Relu -> y [N, 4], seeded weights; N symbolic."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [w, b],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def reference(model: Path, x: np.ndarray) -> np.ndarray:
    m = onnx.load(model)
    w, b = (numpy_helper.to_array(t) for t in m.graph.initializer)
    return np.maximum(x @ w + b, 0).astype(np.float32)


def onnx_data_set(directory: Path, model: Path, *, name: str = "x", shift: float = 0.0) -> Path:
    """An ONNX test_data_set directory built by code: input_0.pb and output_0.pb."""
    directory.mkdir(parents=True)
    x = np.random.default_rng(7).standard_normal((3, 8)).astype(np.float32)
    (directory / "input_0.pb").write_bytes(numpy_helper.from_array(x, name).SerializeToString())
    y = reference(model, x) + np.float32(shift)
    (directory / "output_0.pb").write_bytes(numpy_helper.from_array(y, "y").SerializeToString())
    return directory


def suite_for(tmp_path: Path, model_block: str, backends: str = "[onnxruntime]") -> Path:
    return write_suite(
        tmp_path,
        f"""
        schema_version: 1
        suite: real
        defaults:
          backends: {backends}
          measure: {FAST_MEASURE}
        models:
          - name: mlp
            source: mlp.onnx
        {model_block}
        """,
    )


def feeds_of(suite: Path) -> dict[str, np.ndarray]:
    entry = load_suite(suite).models[0]
    path = Path(entry.source)
    spec = bind(load_model(path), path, dict(entry.inputs), entry.where)
    return make_inputs(spec, dict(entry.inputs))


def test_npz_npy_and_pb_inputs_feed_the_model_and_bind_its_dims(tmp_path):
    mlp(tmp_path / "mlp.onnx")
    x = np.arange(40, dtype=np.float32).reshape(5, 8)
    np.savez(tmp_path / "batch.npz", x=x, other=x[:1])
    np.save(tmp_path / "x.npy", x[:2])
    (tmp_path / "x.pb").write_bytes(numpy_helper.from_array(x[:4], "x").SerializeToString())
    for block, want in [
        ("inputs: {x: {file: batch.npz, key: x}}", x),
        ("inputs: {x: {file: batch.npz, key: other}}", x[:1]),
        ("inputs: {x: {file: batch.npz}}", x),  # key defaults to the input's name
        ("inputs: {x: {file: x.npy}}", x[:2]),
        ("inputs: {x: {file: x.pb}}", x[:4]),
    ]:
        feeds = feeds_of(suite_for(tmp_path, "    " + block))
        np.testing.assert_array_equal(feeds["x"], want)


@pytest.mark.parametrize(
    ("make", "block", "says"),
    [
        (lambda d: np.savez(d / "b.npz", y=np.zeros((1, 8), np.float32)),
         "{file: b.npz, key: x}", "b.npz: has no array named 'x' (it holds: y)"),
        (lambda d: np.save(d / "b.npy", np.zeros((1, 8), np.float64)),
         "{file: b.npy}", "inputs.x: the data is float64, the model's input is float32"),
        (lambda d: np.save(d / "b.npy", np.zeros((1, 9), np.float32)),
         "{file: b.npy}", "the data has shape [1, 9], the model fixes dim 1 to 8"),
        (lambda d: np.save(d / "b.npy", np.zeros((8,), np.float32)),
         "{file: b.npy}", "the data has shape [8] (rank 1), the model's input has rank 2"),
        (lambda d: (d / "b.pb").write_bytes(b"\xff\xff\xff not a tensor"),
         "{file: b.pb}", "b.pb: is not a serialised onnx.TensorProto"),
        (lambda d: (d / "b.pb").write_bytes(b""),
         "{file: b.pb}", "b.pb: is not a valid onnx.TensorProto"),
        (lambda d: (d / "b.pb").write_bytes((d / "mlp.onnx").read_bytes()),  # a ModelProto
         "{file: b.pb}", "b.pb: is not a valid onnx.TensorProto"),
        (lambda d: None, "{file: missing.npy}", "missing.npy: input data file not found"),
    ],
)  # fmt: skip
def test_bad_input_data_names_the_file_and_what_differed(tmp_path, make, block, says):
    mlp(tmp_path / "mlp.onnx")
    make(tmp_path)
    with pytest.raises(ModelError) as err:
        feeds_of(suite_for(tmp_path, f"    inputs: {{x: {block}}}"))
    assert err.value.exit_code == 2
    assert says in str(err.value), str(err.value)


def test_test_data_inputs_bind_by_position_when_unnamed(tmp_path):
    model = mlp(tmp_path / "mlp.onnx")
    onnx_data_set(tmp_path / "test_data_set_0", model, name="")
    feeds = feeds_of(suite_for(tmp_path, "    test_data: test_data_set_0"))
    assert feeds["x"].shape == (3, 8)


@pytest.mark.slow
def test_a_test_data_suite_passes_with_both_goldens_and_fails_on_wrong_expected(tmp_path, workdir):
    model = mlp(tmp_path / "mlp.onnx")
    onnx_data_set(tmp_path / "test_data_set_0", model)
    suite = suite_for(tmp_path, "    test_data: test_data_set_0", backends="[onnxruntime, bundled]")
    for run in ("created", "compared"):
        code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
        doc = json.loads((tmp_path / "r.json").read_text())
        assert code == 0, doc
        for r in doc["results"]:
            checks = {c["name"]: c for c in r["checks"]}
            assert checks["expected"]["status"] == "pass", checks
            assert r["numerics"]["golden_status"] == run
            assert r["numerics"]["expected"]["allclose"] is True
    # The same data with expected outputs that are off: the second golden fails them.
    onnx_data_set(tmp_path / "test_data_set_1", model, shift=0.5)
    bad = suite_for(tmp_path, "    test_data: test_data_set_1", backends="[onnxruntime]")
    code = main(["run", str(bad), "--no-track", "--json", str(tmp_path / "r2.json")])
    (r,) = json.loads((tmp_path / "r2.json").read_text())["results"]
    assert code == 1
    assert [c["name"] for c in r["checks"] if c["status"] == "fail"] == ["expected"]


def write_onnx_case(case, root: Path) -> Path:
    """One of onnx's own node test cases in the layout onnx's ``cmd_tools generate-data``
    writes (model.onnx, test_data_set_0/input_K.pb, output_K.pb)."""
    d = root / case.name
    (d / "test_data_set_0").mkdir(parents=True)
    (d / "model.onnx").write_bytes(case.model.SerializeToString())
    inputs, outputs = case.data_sets[0]
    for kind, arrays, infos in (
        ("input", inputs, case.model.graph.input),
        ("output", outputs, case.model.graph.output),
    ):
        for k, (a, info) in enumerate(zip(arrays, infos, strict=True)):
            tensor = numpy_helper.from_array(np.asarray(a), info.name)
            (d / "test_data_set_0" / f"{kind}_{k}.pb").write_bytes(tensor.SerializeToString())
    return d


@pytest.mark.slow
def test_onnx_node_test_data_passes_with_both_goldens(tmp_path, workdir):
    """onnx's own node cases (float inputs; one and two inputs) in their test-data layout."""
    import warnings

    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy casts in unrelated cases (Cast to fp4, ...)
        cases = {c.name: c for c in node.collect_testcases(None)}
    models = []
    for name in ("test_softmax_axis_1", "test_matmul_2d"):
        write_onnx_case(cases[name], tmp_path)
        models.append(
            f"  - {{name: {name}, source: {name}/model.onnx, test_data: {name}/test_data_set_0}}"
        )
    suite = write_suite(
        tmp_path,
        "schema_version: 1\nsuite: onnxdata\ndefaults:\n  backends: [onnxruntime, bundled]\n"
        f"  measure: {FAST_MEASURE}\nmodels:\n" + "\n".join(models) + "\n",
    )
    code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert code == 0, [(r["model"], r["backend"], r.get("error")) for r in doc["results"]]
    assert len(doc["results"]) == 4
    for r in doc["results"]:
        checks = {c["name"]: c["status"] for c in r["checks"]}
        assert checks["expected"] == "pass" and checks["tolerance"] == "created", checks
