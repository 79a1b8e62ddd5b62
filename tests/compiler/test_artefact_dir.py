"""Artefact: self-contained directory, hashes checked on load, tampering refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.artefact import (
    CODEGEN_FILES,
    FILES,
    MANIFEST,
    load_artefact,
    save_artefact,
)
from guard.core.errors import ModelError

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime_models import feeds_for, small_model  # noqa: E402


@pytest.fixture
def built(tmp_path):
    g, _ = optimize(import_onnx(small_model(), {"x": (1, 4, 8, 8)}), "O2")
    compiled = plan(g)
    manifest = save_artefact(compiled, tmp_path / "art", pipeline="O2", target="host")
    return g, compiled, manifest, tmp_path / "art"


def test_layout_and_manifest(built):
    g, compiled, manifest, art = built
    assert sorted(p.name for p in art.iterdir()) == sorted([*FILES, *CODEGEN_FILES, MANIFEST])
    assert manifest["compiler"]["pipeline"] == "O2" and manifest["compiler"]["target"] == "host"
    assert manifest["compiler"]["profile"] == "native"
    assert manifest["arena_bytes"] == compiled.arena_bytes
    assert manifest["arena_lower_bound_bytes"] == compiled.lower_bound_bytes
    assert manifest["partitions"]["count"] == 1
    assert not any(b"pickle" in (art / f).read_bytes()[:64] for f in FILES)
    index = json.loads((art / "weights.json").read_text())
    assert {t["name"] for t in index["tensors"]} == set(g.constants)
    assert all(t["offset"] % 64 == 0 and len(t["sha256"]) == 64 for t in index["tensors"])
    assert (art / "graph.txt").read_text().startswith("graph ")


def test_load_and_run_equals_reference(built):
    g, compiled, _, art = built
    loaded = load_artefact(art)
    assert loaded.memory == compiled.memory
    feeds = feeds_for(g)
    assert loaded.native is not None  # the native partition runs generated code
    out = loaded.runtime().run(feeds)
    np.testing.assert_allclose(out["y"], run_reference(g, feeds)["y"], rtol=1e-4, atol=1e-5)


def test_manifest_pins_the_code_generator(built):
    import llvmlite

    *_, manifest, art = built
    cg = manifest["codegen"]
    assert cg["llvmlite"] == llvmlite.__version__ and cg["llvm"].count(".") == 2
    assert cg["triple"].startswith(("x86_64", "aarch64")) and cg["opt_level"] == 3
    assert cg["vector_width"] in (4, 8, 16) and cg["features"] == sorted(cg["features"])
    # The IR next to the object is text that names the kernels (FileCheck-style).
    ir_text = (art / "kernels.ll").read_text()
    assert "define void @guard_main(" in ir_text and "fma" in ir_text


def test_an_object_for_another_cpu_is_refused_naming_both(built):
    *_, art = built
    m = json.loads((art / MANIFEST).read_text())
    m["codegen"]["features"] = [*m["codegen"]["features"], "+nosuchfeature"]
    (art / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ModelError, match=r"kernels.o.*cannot run here.*\+nosuchfeature.*lacks"):
        load_artefact(art)
    m["codegen"]["triple"] = (
        "aarch64-linux-gnu"
        if not m["codegen"]["triple"].startswith("aarch64")
        else "x86_64-linux-gnu"
    )
    (art / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ModelError, match="built for .* this machine is"):
        load_artefact(art)


def test_an_interrupted_build_leaves_no_manifest(built, monkeypatch, tmp_path):
    g, compiled, _, art = built
    import guard.compiler.runtime.artefact as artefact

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(artefact, "_write_native", boom)
    with pytest.raises(KeyboardInterrupt):
        save_artefact(compiled, art, pipeline="O2", target="host")
    assert not (art / MANIFEST).exists()  # the old one was removed before writing started
    with pytest.raises(ModelError, match=f"no {MANIFEST}"):
        load_artefact(art)


@pytest.mark.parametrize("name", [*FILES, *CODEGEN_FILES])
def test_a_tampered_file_is_refused(built, name):
    *_, art = built
    p = art / name
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=f"{name}.*sha256 mismatch.*Rebuild"):
        load_artefact(art)


def test_a_consistent_but_rehashed_weight_is_still_refused(built):
    """Editing weights.bin and its manifest hash still fails the per-constant sha256."""
    *_, art = built
    p = art / "weights.bin"
    data = bytearray(p.read_bytes())
    data[0] ^= 0xFF
    p.write_bytes(bytes(data))
    m = json.loads((art / MANIFEST).read_text())
    import hashlib

    m["files"]["weights.bin"] = hashlib.sha256(bytes(data)).hexdigest()
    (art / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ModelError, match="does not match its sha256"):
        load_artefact(art)


def test_schema_version_and_kind_are_checked(built):
    *_, art = built
    m = json.loads((art / MANIFEST).read_text())
    (art / MANIFEST).write_text(json.dumps({**m, "schema_version": 1}))
    with pytest.raises(ModelError, match="schema_version 1"):
        load_artefact(art)
    (art / MANIFEST).write_text(json.dumps({**m, "kind": "other"}))
    with pytest.raises(ModelError, match="kind"):
        load_artefact(art)
    (art / MANIFEST).unlink()
    with pytest.raises(ModelError, match=f"no {MANIFEST}"):
        load_artefact(art)


def test_missing_file_is_named(built):
    *_, art = built
    (art / "memory_plan.json").unlink()
    with pytest.raises(ModelError, match="memory_plan.json: file is missing"):
        load_artefact(art)


def test_backend_glue_build_and_session(tmp_path):
    import onnx

    from guard.backends.base import BuildRequest
    from guard.backends.bundled import ArtefactSession, build_bundled

    model = tmp_path / "small.onnx"
    onnx.save(small_model(), model)
    out = tmp_path / "out"
    out.mkdir()
    req = BuildRequest(model, {"x": (1, 4, 8, 8)}, "host", "host-canonical", 1, out,
                       options={"profile": "gpu-lite"})  # fmt: skip
    info = build_bundled(req)
    # guard's pipeline writes its own manifest.json beside the artefact's: no clash.
    (out / "manifest.json").write_text("{}")
    assert info.compiler["pipeline"] == "O2" and info.compiler["target"] == "host-canonical"
    assert info.compiler["profile"] == "gpu-lite" and info.compiler["version"]
    assert info.compiler["name"] == "guard-compiler" and info.payload == MANIFEST
    with pytest.raises(ModelError, match="unknown option"):
        build_bundled(BuildRequest(model, {"x": (1, 4, 8, 8)}, "host", "host", 1, out,
                                   options={"profiel": "gpu-lite"}))  # fmt: skip
    sess = ArtefactSession(out)
    assert sess.input_names == ["x"] and sess.output_names == ["y"]
    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    feeds = feeds_for(g)
    np.testing.assert_allclose(
        sess.run(feeds)[0], run_reference(g, feeds)["y"], rtol=1e-5, atol=1e-5
    )
    parts = sess.partitions()
    assert parts.count == 2 and parts.fallback_nodes == 2 and parts.by_provider["cpu"] == 2
    mem = sess.memory()
    assert mem.lower_bound_bytes <= mem.arena_bytes <= 1.10 * mem.lower_bound_bytes


def test_session_lists_kernels_per_node_and_profiles_them(tmp_path):
    import onnx

    from guard.backends.base import BuildRequest
    from guard.backends.bundled import BundledBackend

    model = tmp_path / "small.onnx"
    onnx.save(small_model(), model)
    out = tmp_path / "out"
    out.mkdir()
    req = BuildRequest(model, {"x": (1, 4, 8, 8)}, "host", "host", 1, out)
    be = BundledBackend()
    info = be.build(req)
    assert info.compiler["codegen"]["opt_level"] == 3
    sess = be.load(out, 1)
    parts = sess.partitions()
    (native,) = [d for d in parts.details if d["backend"] == "native"]
    assert [n for n, _ in native["kernels"]][0] == "a" and all(
        k.startswith("k") for _, k in native["kernels"]
    )
    g = import_onnx(small_model(), {"x": (1, 4, 8, 8)})
    rows = sess.kernels(feeds_for(g))
    assert rows and abs(sum(r["share"] for r in rows) - 1.0) < 1e-3
    assert rows == sorted(rows, key=lambda r: -r["share"]) and {
        "kernel",
        "op",
        "ms",
        "nodes",
    } <= set(rows[0])
