"""Results are durable first: reports before tracking, bad output paths refused up front,
SIGINT/SIGTERM report what was measured."""

from __future__ import annotations

import json
import signal

import pytest
from faults_helpers import guard_subprocess, kill_when, small_convnet, suite_of

from guard.cli.main import main

DEAD_SERVER = "http://127.0.0.1:9"  # discard port: nothing answers


def _suite(tmp_path, n: int = 1):
    return suite_of(tmp_path, {f"m{i}": small_convnet(tmp_path / f"m{i}.onnx") for i in range(n)})


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown", "--html"])
def test_output_path_that_is_a_directory_is_refused_before_measuring(
    tmp_path, workdir, capsys, flag
):
    out = tmp_path / "out"
    out.mkdir()
    assert main(["run", str(_suite(tmp_path)), "--no-track", flag, str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {out}: is a directory" in err and "Traceback" not in err
    assert not (workdir / ".guard" / "artefacts").exists()  # nothing was built


def test_one_path_for_two_reports_is_refused(tmp_path, workdir, capsys):
    out = tmp_path / "r.out"
    assert (
        main(["run", str(_suite(tmp_path)), "--no-track", "--json", str(out), "--junit", str(out)])
        == 2
    )
    assert "the same file as --json" in capsys.readouterr().err


def test_missing_output_directory_is_refused(tmp_path, workdir, capsys):
    assert (
        main(
            [
                "run",
                str(_suite(tmp_path)),
                "--no-track",
                "--json",
                str(tmp_path / "nope" / "r.json"),
            ]
        )
        == 2
    )
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_results_survive_when_pending_cannot_be_written(tmp_path, workdir, capsys):
    # The tracking server is down and .guard/pending cannot be created: --json still has
    # every result, and the message says so (it used to raise before writing --json).
    (workdir / ".guard").mkdir()
    (workdir / ".guard" / "pending").write_text("a file where a directory should be")
    out = tmp_path / "r.json"
    code = main(
        [
            "run",
            str(_suite(tmp_path, 2)),
            "--tracking-uri",
            DEAD_SERVER,
            "--json",
            str(out),
            "--junit",
            str(tmp_path / "r.xml"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    doc = json.loads(out.read_text())
    assert [r["verdict"] for r in doc["results"]] == ["pass", "pass"]
    assert doc["exit_code"] == 2 and "error" in doc["tracking"]
    assert f"the results are in {out}" in err
    assert (tmp_path / "r.xml").is_file()


@pytest.mark.slow
def test_results_are_written_before_tracking_is_tried(tmp_path, workdir, monkeypatch):
    import guard.track as track

    out = tmp_path / "r.json"
    seen = {}

    def log_journalled(doc, uri, journal, *a, **k):
        seen["json_on_disk"] = json.loads(out.read_text())["results"][0]["verdict"]
        seen["journalled"] = json.loads(journal.read_text())["results"][0]["verdict"]
        raise KeyboardInterrupt  # the user gives up while logging

    monkeypatch.setattr(track, "log_journalled", log_journalled)
    code = main(["run", str(_suite(tmp_path)), "--json", str(out)])
    assert seen == {"json_on_disk": "pass", "journalled": "pass"}
    doc = json.loads(out.read_text())
    assert code == 130 and doc["interrupted"] == "SIGINT" and doc["exit_code"] == 130
    kept = doc["tracking"]["kept"]
    assert json.loads(open(kept).read())["results"][0]["verdict"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_measurement_reports_what_was_measured(tmp_path, workdir, sig):
    # Rounds are interleaved over the results: stop in the second sweep, at m1's round 2,
    # when m0 has two rounds and m1 and m2 one each.
    suite = _suite(tmp_path, 3)
    marker = tmp_path / "second-sweep"
    patch = f"""
    import pathlib
    import guard.run.one_result as one
    _measure_round = one.PendingResult.measure_round
    def measure_round(self, i, **k):
        if i == 1 and self.entry.name == "m1":
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(600)
        return _measure_round(self, i, **k)
    one.PendingResult.measure_round = measure_round
    """
    out = tmp_path / "r.json"
    proc = guard_subprocess(["run", str(suite), "--no-track", "--json", str(out)], workdir, patch)
    kill_when(proc, marker, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] == signal.Signals(sig).name
    assert [r["model"] for r in doc["results"]] == ["m0", "m1", "m2"]
    assert [len(r["rounds"]) for r in doc["results"]] == [2, 1, 1]
    assert all(r["verdict"] == "pass" for r in doc["results"])
    assert "interrupted after 2 of 10 rounds" in doc["results"][0]["preflight"]["warnings"]
    assert "Traceback" not in err and f"interrupted by {signal.Signals(sig).name}" in err
