"""kept_model_path: guard's int8 cache (guard run's int8 rows, guard fit's int8 rung) makes
a model's QDQ model once per profile, options and writer; each part of the key changes the
path; a damaged profile is made again."""

from __future__ import annotations

import json

import onnx
import pytest

import guard.quantize.build as qbuild
from guard.quantize.build import kept_model_path, model_cache_path
from guard.quantize.qdq import QuantOptions

from . import _fixtures as F


@pytest.fixture
def source(tmp_path):
    p = tmp_path / "convnet.onnx"
    onnx.save(F.convnet(), str(p))
    return p


def _kept(source, root, cal=None, opts=None):
    return kept_model_path(
        source, cal or F.samples(4), opts or QuantOptions(), source_sha256="s" * 64, root=root
    )


def test_the_second_call_quantises_nothing(source, tmp_path, monkeypatch):
    root = tmp_path / "int8"
    first = _kept(source, root)
    assert first.is_file() and first.parent == root / "models"
    onnx.checker.check_model(onnx.load(str(first)))
    monkeypatch.setattr(qbuild, "quantize_model", lambda *a, **k: pytest.fail("quantised"))
    assert _kept(source, root) == first


def test_each_part_of_the_key_is_another_model(source, tmp_path, monkeypatch):
    root = tmp_path / "int8"
    first = _kept(source, root)
    assert _kept(source, root, opts=QuantOptions(method="minmax")) != first
    assert _kept(source, root, cal=F.samples(4, seed=1)) != first  # another profile
    monkeypatch.setattr(qbuild, "WRITER_VERSION", "another")
    assert (
        model_cache_path(root, "p" * 64, QuantOptions())
        != ((monkeypatch.undo(), model_cache_path(root, "p" * 64, QuantOptions()))[1])
    )
    monkeypatch.setattr(qbuild, "sources_sha256", lambda root: "0" * 64)
    changed = model_cache_path(root, "p" * 64, QuantOptions())
    monkeypatch.undo()
    assert changed != model_cache_path(root, "p" * 64, QuantOptions())  # the writer's code


def test_a_damaged_profile_is_made_again(source, tmp_path):
    root = tmp_path / "int8"
    first = _kept(source, root)
    (profile,) = (root / "profiles").iterdir()
    profile.write_text("{not json")
    first.unlink()
    again = _kept(source, root)
    assert again == first and again.is_file()
    assert json.loads(profile.read_text())["kind"] == "guard.quantize.profile"  # made again
