"""A large suite streams (issue 28 item 10): a 10,000-model suite built for about 4 hours
before it measured or reported anything. Models are now built, measured and written a
batch at a time, the results so far in an in-progress file replaced atomically."""

from __future__ import annotations

import json

import pytest
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.cli.main import main
from guard.run.stream import batches


def test_batches_keep_a_models_backends_together():
    work = [("a", ("ort", "bundled")), ("b", ("ort",)), ("c", ("ort", "bundled")), ("d", ("ort",))]
    assert batches(work, 2) == [[work[0]], [work[1]], [work[2]], [work[3]]]
    assert batches(work, 3) == [[work[0], work[1]], [work[2], work[3]]]
    assert batches(work, 16) == [work]
    assert batches([("big", ("a", "b", "c"))], 2) == [[("big", ("a", "b", "c"))]]


def test_a_bad_batch_size_is_exit_2(tmp_path, workdir, monkeypatch, capsys):
    monkeypatch.setenv("GUARD_BATCH", "0")
    suite = write_suite(tmp_path, f"""
    schema_version: 1
    suite: s
    defaults: {{backends: [onnxruntime], measure: {FAST_MEASURE}}}
    models: [{{name: m, source: {small_convnet(tmp_path / "m.onnx")}}}]
    """)  # fmt: skip
    assert main(["run", str(suite), "--no-track"]) == 2
    assert "GUARD_BATCH must be a positive integer" in capsys.readouterr().err


@pytest.mark.slow
def test_results_are_written_as_each_batch_finishes(tmp_path, workdir, monkeypatch):
    """Three models, one per batch: when the third is being built, the first two are
    measured, judged and in the --json file, marked in progress."""
    import guard.run.runner as runner

    monkeypatch.setenv("GUARD_BATCH", "1")
    entries = "".join(
        f"\n      - {{name: m{i}, source: {small_convnet(tmp_path / f'm{i}.onnx')}}}"
        for i in range(3)
    )
    suite = write_suite(tmp_path, f"""
    schema_version: 1
    suite: stream
    defaults: {{backends: [onnxruntime], measure: {FAST_MEASURE}}}
    models:{entries}
    """)  # fmt: skip
    out = tmp_path / "r.json"
    seen: dict[str, dict] = {}
    begin = runner.begin_result

    def spy(entry, *a, **k):
        if out.is_file():
            seen[entry.name] = json.loads(out.read_text())
        return begin(entry, *a, **k)

    monkeypatch.setattr(runner, "begin_result", spy)
    assert main(["run", str(suite), "--no-track", "--json", str(out)]) == 0
    assert "m0" not in seen  # nothing written before the first batch
    two = seen["m2"]
    assert [r["model"] for r in two["results"]] == ["m0", "m1"]
    assert all(r["verdict"] == "pass" and r["rounds"] for r in two["results"])
    assert two["in_progress"] == {"done": 2, "total": 3} and two["suite"] == "stream"
    final = json.loads(out.read_text())
    assert [r["model"] for r in final["results"]] == ["m0", "m1", "m2"]
    assert "in_progress" not in final
