"""``guard calibrate``: the command over guard.bench.calibrate's A/A statistic."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import pytest

import guard.calibrate
from guard.bench.calibrate import default_noise_path, load_noise
from guard.cli import main
from guard.errors import TrackingError

SMOKE = Path(__file__).resolve().parents[1] / "suites" / "smoke.yaml"


@pytest.mark.slow
def test_calibrate_cli_on_the_smoke_suite(tmp_path, monkeypatch, capsys):
    """Real cases, short rounds: a noise file compare then picks up by default."""
    monkeypatch.chdir(tmp_path)
    code = main(["calibrate", str(SMOKE), "--rounds", "3", "--round-s", "0.15", "--no-track"])
    assert code == 0
    noise = load_noise(default_noise_path(tmp_path, "smoke"))
    assert {k.split("/")[0] for k in noise} == {"mlp", "digits", "inception_block"}
    # The size of the noise is a property of the machine (a busy second core doubles it), not
    # of the code: assert it was measured, not how quiet the machine was.
    assert all(math.isfinite(v) and v >= 0 for v in noise.values())
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"wrote {default_noise_path(tmp_path, 'smoke')}"
    assert all(
        " noise " in line and "% (A/A p99 |ratio-1| over 3 rounds)" in line
        for line in out.splitlines()[:-1]
    )


def test_calibrate_checks_the_tracking_uri_before_measuring(tmp_path, monkeypatch):
    def measured(*a, **k):
        raise AssertionError("measured before the tracking URI was checked")

    monkeypatch.setattr(guard.calibrate, "prepare_cases", measured)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TrackingError, match="cannot reach"):
        guard.calibrate.calibrate_suite(
            SMOKE, tracking_uri=f"http://127.0.0.1:{port}", workdir=tmp_path
        )
    with pytest.raises(TrackingError, match="not a tracking URI"):
        guard.calibrate.calibrate_suite(SMOKE, tracking_uri="localhost:5000", workdir=tmp_path)


def test_calibrate_bad_suite_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nsuite: x\nmodels: nope\n")
    assert main(["calibrate", str(bad), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("guard: error: ") and str(bad) in err and len(err.splitlines()) == 1
