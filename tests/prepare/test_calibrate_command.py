"""``guard calibrate``: the command over guard.stats.calibrate's A/A statistic."""

from __future__ import annotations

import math
import socket
from pathlib import Path

import numpy as np
import pytest

import guard.prepare.calibrate
from guard.cli.main import main
from guard.core.errors import TrackingError, UsageError
from guard.stats.calibrate import default_noise_path, load_noise, run_noise_pct

SMOKE = Path(__file__).resolve().parents[2] / "suites" / "smoke.yaml"


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
    run_noise = load_noise(default_noise_path(tmp_path, "smoke"), "run")
    assert set(run_noise) == set(noise)  # --runs 5 by default: every result's run noise
    assert all(math.isfinite(v) and v >= 0 for v in run_noise.values())
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"wrote {default_noise_path(tmp_path, 'smoke')}"
    assert all(
        " noise " in line
        and "% (A/A p99 |ratio-1| over 3 rounds)" in line
        and "% (SD beyond rounds, 5 runs)" in line
        for line in out.splitlines()[:-1]
    )


def test_run_noise_is_what_whole_runs_add_beyond_their_rounds():
    """Runs whose rounds agree with each other but whose levels differ by ~2%."""
    rng = np.random.default_rng(0)
    levels = [10.0 * np.exp(rng.normal(0, 0.02)) for _ in range(40)]
    runs = [list(level * np.exp(rng.normal(0, 0.01, 10))) for level in levels]
    assert 1.4 < run_noise_pct(runs) < 2.6
    same = [list(10.0 * np.exp(rng.normal(0, 0.01, 10))) for _ in range(40)]
    assert run_noise_pct(same) < 0.3  # levels that wander only as rounds predict: ~0
    with pytest.raises(UsageError, match="at least 3 runs"):
        run_noise_pct(runs[:2])


def test_run_noise_leaves_out_what_the_host_probe_saw():
    """Runs on a machine whose speed moved 8% between them, the model feeling half of it:
    their levels spread ~4%, but at equal host speed they agree as their rounds predict."""
    rng = np.random.default_rng(1)
    runs, hosts = [], []
    for _ in range(40):
        log_host = rng.normal(0, 0.08) + rng.normal(0, 0.05, 10)
        hosts.append(list(4.0 * np.exp(log_host)))
        runs.append(list(10.0 * np.exp(0.5 * log_host + rng.normal(0, 0.01, 10))))
    assert run_noise_pct(runs) > 3.0
    assert run_noise_pct(runs, hosts) < 0.5
    # a second probe the model does not feel changes nothing; one reading short, no adjusting
    two = [[(h, 1.0 + 0.1 * rng.random()) for h in hs] for hs in hosts]
    assert run_noise_pct(runs, two) < 0.5
    assert run_noise_pct(runs, [*hosts[:-1], hosts[-1][:-1]]) > 3.0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rounds", "0", "--runs", "0"], "nothing to calibrate"),
        (["--runs", "2"], "--runs must be 0 or at least 3"),
    ],
)
def test_calibrate_refuses_what_cannot_be_estimated(tmp_path, monkeypatch, capsys, argv, says):
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", str(SMOKE), "--no-track", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / ".guard").exists()  # refused before anything was built


def test_calibrate_checks_the_tracking_uri_before_measuring(tmp_path, monkeypatch):
    def measured(*a, **k):
        raise AssertionError("measured before the tracking URI was checked")

    monkeypatch.setattr(guard.prepare.calibrate, "prepare_cases", measured)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TrackingError, match="cannot reach"):
        guard.prepare.calibrate.calibrate_suite(
            SMOKE, tracking_uri=f"http://127.0.0.1:{port}", workdir=tmp_path
        )
    with pytest.raises(TrackingError, match="not a tracking URI"):
        guard.prepare.calibrate.calibrate_suite(
            SMOKE, tracking_uri="localhost:5000", workdir=tmp_path
        )


def test_calibrate_bad_suite_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema_version: 1\nsuite: x\nmodels: nope\n")
    assert main(["calibrate", str(bad), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("guard: error: ") and str(bad) in err and len(err.splitlines()) == 1
