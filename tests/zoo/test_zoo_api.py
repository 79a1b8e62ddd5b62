"""The public API: names, errors, describe, cache location and key, reuse, atomic writes."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import guard.zoo as zoo
from guard.core.errors import InternalError, UsageError
from guard.zoo import cache, registry

LIGHT = [
    "alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]
BUILT_BY_CODE = [
    "digits",
    "inception_block",
    "mlp",
    "mobilenet_v2",
    "transformer",
    "transformer_decomposed",
]


def test_list_models_is_every_model_sorted():
    assert zoo.list_models() == sorted(LIGHT + BUILT_BY_CODE)


def test_unknown_model_names_it_suggests_and_lists():
    with pytest.raises(UsageError) as err:
        zoo.model_path("zoo:resnt50")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("zoo:resnt50: unknown zoo model 'resnt50'")
    assert "Did you mean 'resnet50'?" in message
    assert ", ".join(zoo.list_models()) in message
    assert err.value.exit_code == 2


def test_unknown_name_without_a_close_match_lists_only():
    with pytest.raises(UsageError) as err:
        zoo.describe("qqqqqqqq")
    assert "Did you mean" not in str(err.value)
    assert "mlp" in str(err.value)


def test_unknown_dataset_suggests():
    with pytest.raises(
        UsageError, match=r"zoo:digits: unknown zoo dataset 'digits'.*'digits-test'"
    ):
        zoo.load_dataset("zoo:digits")


def test_describe_every_model():
    for name in zoo.list_models():
        desc = zoo.describe(name)
        assert desc["name"] == name
        assert desc["description"] and "\n" not in desc["description"]
        assert desc["inputs"] and desc["outputs"]
        for dims in [*desc["inputs"].values(), *desc["outputs"].values()]:
            assert all(isinstance(d, str) or (isinstance(d, int) and d > 0) for d in dims)
        assert desc["opset"] == (9 if name in LIGHT else 16 if name.endswith("_decomposed") else 17)
        assert desc["dataset"] == ("zoo:digits-test" if name == "digits" else None)


def test_describe_accepts_prefix_and_reports_symbolic_dims():
    assert zoo.describe("zoo:mlp") == zoo.describe("mlp")
    assert zoo.describe("mlp")["inputs"] == {"x": ["N", 256]}
    assert zoo.describe("resnet50")["inputs"] == {"gpu_0/data_0": [1, 3, 224, 224]}


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "g"))
    assert zoo.default_cache_dir() == tmp_path / "g" / "zoo"
    monkeypatch.delenv("GUARD_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert zoo.default_cache_dir() == tmp_path / "home" / ".cache" / "guard" / "zoo"


def test_model_path_uses_guard_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path))
    path = zoo.model_path("zoo:mlp")
    assert path.parent == tmp_path / "zoo"
    assert path.name.startswith("mlp-") and path.suffix == ".onnx"


def test_cache_key_covers_name_builder_version_and_packages(monkeypatch):
    mlp = registry.spec("mlp")
    key = cache.cache_key(mlp)
    assert cache.cache_key(mlp) == key
    assert cache.cache_key(dataclasses.replace(mlp, version="other")) != key
    assert cache.cache_key(dataclasses.replace(mlp, name="other")) != key
    real = cache.metadata.version
    for package in ("onnx", "numpy"):
        monkeypatch.setattr(
            cache.metadata, "version", lambda p, pkg=package: "0.0" if p == pkg else real(p)
        )
        assert cache.cache_key(mlp) != key, package
    # a package only some builders depend on is in their key only
    monkeypatch.setattr(
        cache.metadata, "version", lambda p: "0.0" if p == "onnxruntime" else real(p)
    )
    assert cache.cache_key(mlp) == key
    resnet = registry.spec("resnet50")
    monkeypatch.setattr(cache.metadata, "version", real)
    resnet_key = cache.cache_key(resnet)
    monkeypatch.setattr(
        cache.metadata, "version", lambda p: "0.0" if p == "onnxruntime" else real(p)
    )
    assert cache.cache_key(resnet) != resnet_key


def _failing_spec(monkeypatch, name: str) -> None:
    """Make any further build of ``name`` fail loudly."""

    def refuse():
        raise AssertionError(f"{name} was rebuilt although it is cached")

    monkeypatch.setitem(
        registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], build=refuse)
    )


def test_second_call_reuses_the_cache(monkeypatch, tmp_path):
    builds = cache.BUILDS["mlp"]
    first = zoo.model_path("mlp", tmp_path)
    assert cache.BUILDS["mlp"] == builds + 1
    stat = first.stat()
    _failing_spec(monkeypatch, "mlp")
    time.sleep(0.01)
    second = zoo.model_path("zoo:mlp", tmp_path)
    assert second == first
    assert cache.BUILDS["mlp"] == builds + 1
    assert second.stat().st_mtime_ns == stat.st_mtime_ns
    assert second.stat().st_ino == stat.st_ino


def test_failed_write_leaves_no_file(monkeypatch, tmp_path):
    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache.os, "fsync", boom)
    with pytest.raises(UsageError, match=r"zoo:mlp: cannot write .*mlp-.*No space left"):
        zoo.model_path("mlp", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_write_leaves_no_file(monkeypatch, tmp_path):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        zoo.model_path("mlp", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_killed_build_never_leaves_a_half_file(tmp_path):
    """SIGKILL a real build mid-write: no model file; the next call builds a whole one."""
    child = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        import guard.zoo as zoo
        from guard.zoo import cache
        real_fsync = os.fsync
        def stall(fd):  # the bytes are in the temp file, the rename has not happened
            print("writing", flush=True)
            time.sleep(60)
        cache.os.fsync = stall
        zoo.model_path("mlp", Path({str(tmp_path)!r}))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    leftovers = list(tmp_path.iterdir())
    assert [p for p in leftovers if p.suffix == ".onnx"] == []
    assert all(p.name.startswith(".mlp-") and p.name.endswith(".tmp") for p in leftovers)
    path = zoo.model_path("mlp", tmp_path)
    assert path.read_bytes() == zoo.model_path("mlp", tmp_path / "fresh").read_bytes()


def test_invalid_build_is_an_internal_error_and_not_cached(monkeypatch, tmp_path):
    build = registry.REGISTRY["mlp"].build

    def broken():
        model = build()
        model.graph.node[0].input[0] = "nowhere"  # an undefined tensor
        return model

    monkeypatch.setitem(
        registry.REGISTRY, "mlp", dataclasses.replace(registry.REGISTRY["mlp"], build=broken)
    )
    with pytest.raises(
        InternalError, match=r"zoo:mlp: the built model fails onnx.checker.*nowhere"
    ):
        zoo.model_path("mlp", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_build_removes_only_stale_temp_files(tmp_path):
    target = cache.cached_file("mlp", tmp_path)
    stale = tmp_path / f".{target.name}.old.tmp"
    fresh = tmp_path / f".{target.name}.live.tmp"  # maybe another process, still writing
    other = tmp_path / ".transformer-0123.onnx.old.tmp"
    for p in (stale, fresh, other):
        p.write_bytes(b"partial")
    old = time.time() - 2 * cache.STALE_TEMP_S
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    zoo.model_path("mlp", tmp_path)
    assert not stale.exists() and fresh.exists() and other.exists()


def test_unwritable_cache_dir_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(
        UsageError, match=r"zoo:mlp: cannot create the zoo cache directory .*GUARD_CACHE"
    ):
        zoo.model_path("mlp", blocker / "zoo")


def test_load_dataset_digits_test():
    assert zoo.list_datasets() == ["digits-test"]
    x, y = zoo.load_dataset("digits-test")
    x2, y2 = zoo.load_dataset("zoo:digits-test")
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert x.dtype == np.float32 and y.dtype == np.int64
    assert x.shape == (359, 64) and y.shape == (359,)  # 20% of 1797
    assert x.min() == 0 and x.max() == 16  # raw pixels: the model scales in-graph
    assert set(np.unique(y)) == set(range(10))
    # callers may write into what they got without corrupting the next caller's copy
    x[:] = -1
    y[:] = -1
    x3, y3 = zoo.load_dataset("digits-test")
    np.testing.assert_array_equal(x3, x2)
    np.testing.assert_array_equal(y3, y2)


def test_cached_file_is_where_model_path_writes(tmp_path):
    assert cache.cached_file("zoo:mlp", tmp_path) == zoo.model_path("mlp", tmp_path)
    assert isinstance(cache.cached_file("mlp"), Path)
