"""The three ways to miss a whole tuning cache, end to end through `guard tune` and
`guard run` on a small model: a target attribute changed, a sequence length 128 -> 127,
a compiler version bump. Each is a total miss with correct outputs, the default schedules
used, and the tuning check failing with the missed keys and what differs."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.cli.main import main
from guard.manifest import canonicalize

pytestmark = pytest.mark.slow

MEASURE = "{warmup_s: 0.0, min_iters: 3, min_time_s: 0.001, max_time_s: 2}"


def ffn_model(path: Path) -> Path:
    """x [1, seq, 64] -> MatMul 64x128 -> Relu -> MatMul 128x64: two GEMM tasks per seq."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32) * 0.1, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((128, 64)).astype(np.float32) * 0.1, "w2")
    g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["y"]),
        ],
        "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 64])],
        [w1, w2],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def write_suite(d: Path, name: str, seq: int = 128, target: str = "host") -> Path:
    """One suite name per input shape: the variants share the first run's golden outputs."""
    p = d / f"{name}.yaml"
    p.write_text(
        textwrap.dedent(f"""\
        schema_version: 1
        suite: tuned{"" if seq == 128 else seq}
        defaults:
          backends: [bundled]
          target: {json.dumps(target)}
          measure: {MEASURE}
          options:
            bundled: {{tuning_cache: cache.json}}
          checks:
            tolerance: {{rtol: 1.0e-4, atol: 1.0e-4}}
            tuning: {{min_hit_rate: 1.0}}
        models:
          - name: ffn
            source: ffn.onnx
            inputs:
              x: {{shape: [1, {seq}, 64], dist: normal, seed: 0}}
        """)
    )
    return p


def run(suite: Path, out: Path) -> tuple[int, dict]:
    code = main(["run", str(suite), "--no-track", "--json", str(out)])
    return code, json.loads(out.read_text())["results"][0]


def check(result: dict, name: str) -> dict:
    return next(c for c in result["checks"] if c["name"] == name)


def cached_tasks(d: Path) -> list[dict]:
    """The tuned cache's entries: one per task shape of the split GEMMs (the thread split
    cuts each MatMul's rows into tasks, and a task is what is tuned and keyed)."""
    return json.loads((d / "cache.json").read_text())["entries"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    d = tmp_path_factory.mktemp("tuned")
    ffn_model(d / "ffn.onnx")
    suite = write_suite(d, "tuned")
    assert main(["tune", str(suite), "--budget-s", "2", "--reps", "2"]) == 0
    return d


def test_tune_then_run_hits_every_task(tuned, monkeypatch):
    monkeypatch.chdir(tuned)
    cache = json.loads((tuned / "cache.json").read_text())
    assert cache["schema_version"] == 1 and len(cache["entries"]) == 2
    code, r = run(tuned / "tuned.yaml", tuned / "r.json")
    assert code == 0, r["checks"]
    tc = r["manifest"]["tuning_cache"]
    assert (tc["hits"], tc["misses"], tc["entries"]) == (2, 0, 2)
    assert tc["sha256"] and check(r, "tuning")["value"] == 1.0
    assert tc["kernel_speedup"] >= 1.0  # a tuned schedule is kept only when it measured faster
    assert "faster than their default schedules" in check(r, "tuning")["message"]


def test_a_dropped_target_feature_misses_every_task_and_says_which(tuned, monkeypatch):
    monkeypatch.chdir(tuned)
    host = canonicalize("host")
    feats = host.split("-mattr=")[1].split()[0].split(",")
    # A feature that changes nothing the code generator uses, so only the key differs.
    drop = next((f for f in ("+sha", "+aes", "+popcnt") if f in feats), feats[-1])
    target = host.replace(drop + ",", "") if drop + "," in host else host.replace("," + drop, "")
    code, r = run(write_suite(tuned, "drop", target=target), tuned / "r2.json")
    assert code == 1
    msg = check(r, "tuning")["message"]
    assert "hit rate 0.000 (0/2)" in msg and f"target differs: {drop} removed" in msg
    named = [e["key"].split(" target=")[0] for e in cached_tasks(tuned)]
    assert any(k in msg for k in named), (named, msg)
    assert check(r, "tolerance")["status"] == "pass"  # default schedules, correct outputs
    missed = r["manifest"]["tuning_cache"]["missed"]
    assert {m["differs"] for m in missed} == {f"target differs: {drop} removed"}


def test_a_sequence_length_change_names_the_shape(tuned, monkeypatch):
    monkeypatch.chdir(tuned)
    code, r = run(write_suite(tuned, "seq127", seq=127), tuned / "r3.json")
    assert code == 1
    msg = check(r, "tuning")["message"]
    # 127 rows no longer cut into the tuned tasks' rows: a task's M differs, and the
    # message names the row count it has against the nearest tuned one's.
    found = re.search(r"shape differs: dim 0 \(M\) (\d+) vs (\d+)", msg)
    assert found, msg
    tuned_rows = {dict(e["shape"])["M"] for e in cached_tasks(tuned)}
    assert int(found[2]) in tuned_rows and int(found[1]) not in tuned_rows
    assert check(r, "tolerance")["status"] in ("pass", "created")


def test_a_compiler_bump_misses_and_names_both_versions(tuned, monkeypatch):
    import guard

    monkeypatch.chdir(tuned)
    old = guard.__version__
    monkeypatch.setattr(guard, "__version__", old + ".post1")
    code, r = run(write_suite(tuned, "bump"), tuned / "r4.json")
    assert code == 1
    msg = check(r, "tuning")["message"]
    assert f"compiler {old}.post1 vs {old}" in msg
    assert check(r, "tolerance")["status"] == "pass"


def test_compare_attributes_the_move_to_the_misses(tuned, monkeypatch):
    """Base: the tuned run; head: the compiler-bump run (same model and target)."""
    monkeypatch.chdir(tuned)
    out = tuned / "cmp.json"
    main(["compare", str(tuned / "r.json"), str(tuned / "r4.json"), "--json", str(out)])
    row = json.loads(out.read_text())["rows"][0]
    assert "tuning hit rate 100% → 0% (compiler " in row["attribution"]


def test_a_corrupt_cache_is_exit_2_naming_the_file(tuned, monkeypatch, capsys):
    monkeypatch.chdir(tuned)
    bad = tuned / "bad"
    bad.mkdir()
    (bad / "ffn.onnx").write_bytes((tuned / "ffn.onnx").read_bytes())
    (bad / "cache.json").write_text(
        '{"kind": "guard-bundled-tuning-cache", "schema_version": 1, '
        '"entries": [{"key": 1}], "entries_sha256": "x"}'
    )
    code = main(["run", str(write_suite(bad, "bad")), "--no-track"])
    err = capsys.readouterr().err
    assert code == 2 and "entries_sha256 does not match" in err and "Traceback" not in err
