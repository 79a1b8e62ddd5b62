"""Bundled artefacts built for AArch64 on this host, run under emulation, against the oracle.

Every zoo model and the nine onnx light topologies are built for
``llvm -mtriple=aarch64-linux-gnu -mattr=+neon`` and run under qemu-aarch64-static; their
outputs must equal the reference interpreter's within rtol 1e-4 / atol 1e-5. A small
subset runs in the default test run; the rest is marked slow. On an AArch64 host the
roles swap: the artefacts are built for x86_64 and emulated with qemu-x86_64-static.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from emulate_fakes import tools_mark
from onnx import TensorProto, helper, numpy_helper

from guard.backends import get_backend
from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.artefact import load_artefact, save_artefact
from guard.core.errors import ModelError, UsageError
from guard.emulate import EmulatedSession, host_arch
from guard.emulate.bundled import MixedEmulatedSession, load_emulated
from guard.emulate.load import load_session
from guard.emulate.tools import TOOLCHAINS
from guard.manifest.target_string import canonicalize
from guard.results.manifest import Manifest

OTHER = "x86_64" if host_arch() == "aarch64" else "aarch64"
FOREIGN = {
    "aarch64": "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
    "x86_64": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v2",
}[OTHER]
TC = TOOLCHAINS[OTHER]
needs_tools = tools_mark(TC)
RTOL, ATOL = 1e-4, 1e-5


def _feeds(g, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i: rng.standard_normal(g.values[i].shape).astype(g.values[i].dtype) for i in g.inputs}


def _build(model, shapes, out: Path):
    g, _ = optimize(import_onnx(model, shapes), "O2")
    save_artefact(plan(g), out, pipeline="O2", target=canonicalize(FOREIGN))
    return g


def _assert_matches_reference(session, g, feeds) -> None:
    ref = run_reference(g, feeds)
    got = session.run(feeds)
    assert session.output_names == list(g.outputs)
    for name, a in zip(session.output_names, got, strict=True):
        np.testing.assert_allclose(a, ref[name], rtol=RTOL, atol=ATOL, err_msg=name)


def with_host_partition() -> onnx.ModelProto:
    """Conv -> Sin (no emitter: the cpu fallback) -> Relu -> Gemm: native | cpu | native."""
    rng = np.random.default_rng(3)

    def init(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Sin", ["a"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [init("w1", 4, 3, 3, 3), init("b1", 4), init("w2", 5, 144)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _zoo_graph_shapes(name: str):
    from guard import zoo

    d = zoo.describe(name)
    shapes = {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}
    return zoo.model_path(name), shapes


def _zoo_models() -> list[str]:
    from guard import zoo

    return zoo.list_models()


FAST_ZOO = ("mlp", "digits")  # seconds each; the others are marked slow


@needs_tools
@pytest.mark.parametrize("name", FAST_ZOO)
def test_fast_zoo_models_under_emulation_equal_the_reference(tmp_path: Path, name: str) -> None:
    model, shapes = _zoo_graph_shapes(name)
    g = _build(model, shapes, tmp_path / name)
    session = load_emulated(tmp_path / name, 1)
    assert isinstance(session, EmulatedSession)  # every partition native: one guard_main
    assert session.partitions().count == 1
    _assert_matches_reference(session, g, _feeds(g))


@needs_tools
def test_a_data_set_runs_in_one_emulator_start(tmp_path: Path) -> None:
    model, shapes = _zoo_graph_shapes("mlp")
    g = _build(model, shapes, tmp_path / "mlp")
    session = load_emulated(tmp_path / "mlp", 1)
    feeds = [_feeds(g, seed) for seed in range(4)]
    outs = session.run_many(feeds)
    for f, out in zip(feeds, outs, strict=True):
        ref = run_reference(g, f)
        np.testing.assert_allclose(out[0], ref[g.outputs[0]], rtol=RTOL, atol=ATOL)
    assert not np.array_equal(outs[0][0], outs[1][0])  # each sample its own output


@needs_tools
def test_host_partitions_run_here_and_native_ones_emulated(tmp_path: Path) -> None:
    g = _build(with_host_partition(), {"x": (1, 3, 6, 6)}, tmp_path / "mixed")
    session = load_emulated(tmp_path / "mixed", 1)
    assert isinstance(session, MixedEmulatedSession)
    parts = session.partitions()
    assert parts.count >= 2 and parts.by_provider.get("cpu") == 1  # the Sin
    for seed in (0, 1):  # the arena is reused between runs
        _assert_matches_reference(session, g, _feeds(g, seed))
    session.close()


@needs_tools
def test_guard_runs_the_foreign_target_through_load_session(tmp_path: Path) -> None:
    model, shapes = _zoo_graph_shapes("digits")
    _build(model, shapes, tmp_path / "d")
    manifest = Manifest.from_json({"target": {"canonical": canonicalize(FOREIGN)}})
    session = load_session(get_backend("bundled"), tmp_path / "d", 1, manifest)
    assert getattr(session, "latency_status", None) == "emulated"


def test_a_foreign_artefact_refuses_to_load_natively(tmp_path: Path) -> None:
    model, shapes = _zoo_graph_shapes("mlp")
    _build(model, shapes, tmp_path / "mlp")
    with pytest.raises(ModelError) as e:
        load_artefact(tmp_path / "mlp")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'mlp' / 'kernels.o'}: kernels.o cannot run here: built "
                          f"for {OTHER}-linux-gnu")  # fmt: skip
    assert f"this machine is {host_arch()}-linux-gnu" in msg and "\n" not in msg
    with pytest.raises(ModelError, match="kernels.o cannot run here"):
        get_backend("bundled").load(tmp_path / "mlp", 1)
    # verified without mapping the object: what emulation loads
    assert load_artefact(tmp_path / "mlp", native=False).native is None


def test_a_backend_without_codegen_is_refused_a_foreign_target(tmp_path: Path) -> None:
    manifest = Manifest.from_json({"target": {"canonical": canonicalize(FOREIGN)}})
    with pytest.raises(UsageError) as e:
        load_session(get_backend("onnxruntime"), tmp_path, 1, manifest)
    msg = str(e.value)
    assert msg.startswith(f"backend onnxruntime cannot run {OTHER} code on this {host_arch()} host")
    assert "backends: [bundled]" in msg and "\n" not in msg


@needs_tools
@pytest.mark.slow
@pytest.mark.emulated
@pytest.mark.parametrize("name", [n for n in _zoo_models() if n not in FAST_ZOO])
def test_every_zoo_model_under_emulation_equals_the_reference(tmp_path: Path, name: str) -> None:
    model, shapes = _zoo_graph_shapes(name)
    g = _build(model, shapes, tmp_path / name)
    _assert_matches_reference(load_emulated(tmp_path / name, 1), g, _feeds(g))


def _light_models() -> list[Path]:
    return sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx"))


def test_there_are_nine_light_topologies() -> None:
    assert len(_light_models()) == 9


@needs_tools
@pytest.mark.slow
@pytest.mark.emulated
@pytest.mark.parametrize("path", _light_models(), ids=lambda p: p.stem)
def test_the_light_topologies_under_emulation_equal_the_reference(
    tmp_path: Path, path: Path
) -> None:
    g = _build(path, None, tmp_path / path.stem)
    _assert_matches_reference(load_emulated(tmp_path / path.stem, 1), g, _feeds(g))


def test_the_foreign_artefact_holds_code_for_its_target(tmp_path: Path) -> None:
    """FileCheck-style: the object is an ELF for the target, the IR has its vector width."""
    model, shapes = _zoo_graph_shapes("inception_block")
    _build(model, shapes, tmp_path / "ib")
    obj = (tmp_path / "ib" / "kernels.o").read_bytes()
    machine = {"aarch64": 183, "x86_64": 62}[OTHER]  # ELF e_machine: EM_AARCH64, EM_X86_64
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == machine
    ir_text = (tmp_path / "ib" / "kernels.ll").read_text()
    assert f'target triple = "{OTHER}-linux-gnu"' in ir_text
    assert "<4 x float>" in ir_text  # NEON (and SSE, for x86-64-v2): 4 lanes
    assert "<8 x float>" not in ir_text and "<16 x float>" not in ir_text
    manifest = load_artefact(tmp_path / "ib", native=False).manifest
    assert manifest["codegen"]["triple"] == f"{OTHER}-linux-gnu"
    assert manifest["codegen"]["vector_width"] == 4


@needs_tools
def test_the_static_runner_runs_the_same_pool(tmp_path: Path) -> None:
    """A foreign build whose convolutions are split into tasks: the emulated runner with
    threads 1 and 2 gives the same bits, equal to the reference."""
    import json

    from compiler.codegen.test_threads import _net  # tests/ is on sys.path (its conftest)

    from guard.compiler.ir.isa_table import table_for

    arch = "neon" if OTHER == "aarch64" else "sse"
    g, _ = optimize(import_onnx(_net(32, 24), {}), "O2", target=table_for(arch))
    save_artefact(plan(g), tmp_path / "net", pipeline="O2", target=canonicalize(FOREIGN))
    kernels = json.loads((tmp_path / "net" / "kernels.json").read_text())
    assert any(s["tasks"] >= 2 for p in kernels["partitions"] for s in p["steps"])
    feeds = _feeds(g)
    one = load_emulated(tmp_path / "net", 1).run(feeds)
    two = load_emulated(tmp_path / "net", 2).run(feeds)
    assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    # six float32 convolutions of 32 channels deep: sums of ~300 products per layer
    np.testing.assert_allclose(two[0], run_reference(g, feeds)["y"], rtol=1e-4, atol=5e-4)
