"""The compare CLI end to end on synthetic results files, and branch baselines from MLflow."""

from __future__ import annotations

import json

import numpy as np
import pytest
from compare_fixtures import doc, lat, manifest, result

from guard.cli.main import main


def write(path, d):
    path.write_text(json.dumps(d))
    return str(path)


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(0)
    a = write(tmp_path / "a.json", doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=4))))
    a2 = write(tmp_path / "a2.json", doc(result("mlp", lat(rng)), result("cnn", lat(rng, ms=4))))
    slow = write(
        tmp_path / "slow.json",
        doc(result("mlp", lat(rng, factor=1.12)), result("cnn", lat(rng, ms=4))),
    )
    return a, a2, slow


def test_compare_exits_0_on_aa_and_1_on_slower_head(pair, tmp_path, capsys):
    a, a2, slow = pair
    assert main(["compare", a, a2, "--quiet"]) == 0
    out = tmp_path / "c.json"
    md = tmp_path / "c.md"
    assert (
        main(
            [
                "compare",
                a,
                slow,
                "--json",
                str(out),
                "--markdown",
                str(md),
                "--html",
                str(tmp_path / "c.html"),
            ]
        )
        == 1
    )
    cmp = json.loads(out.read_text())
    assert cmp["schema_version"] == 1 and cmp["rows"][0]["verdict"] == "regressed"
    printed = capsys.readouterr().out
    assert printed.startswith("## Manifest diff") and "REGRESSED" in printed
    assert md.read_text() == printed  # the file is what was printed


def test_strict_fails_inconclusive(tmp_path):
    rng = np.random.default_rng(1)
    a = write(tmp_path / "a.json", doc(result("mlp", lat(rng, n=5))))
    b = write(tmp_path / "b.json", doc(result("mlp", lat(rng, n=5))))
    assert main(["compare", a, b, "--quiet"]) == 0
    assert main(["compare", a, b, "--quiet", "--strict"]) == 1


def test_bad_inputs_exit_2_with_one_line(tmp_path, pair, capsys):
    a, _, _ = pair
    assert main(["compare", a, str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert "missing.json: results file not found" in err and err.count("\n") == 1
    other = write(
        tmp_path / "other.json",
        doc(result("mlp", lat(np.random.default_rng(2)), manifest=manifest(host__cpu="Graviton4"))),
    )
    assert main(["compare", a, other]) == 2
    assert "host.cpu differs: baseline 'Xeon EMR', head 'Graviton4'" in capsys.readouterr().err
    assert main(["compare", a, a, "--regress-pct", "-3"]) == 2
    assert main(["compare", "branch:main", "branch:pr"]) == 2
    assert main(["compare", a, a, a]) == 2
    assert main(["compare", a, a, "--baseline", a]) == 2


def test_noise_file_raises_threshold(pair, tmp_path):
    a, _, slow = pair
    from guard.stats.calibrate import save_noise

    noise = tmp_path / "noise.json"
    save_noise(
        noise,
        "smoke",
        {"mlp/onnxruntime/llvm -mcpu=sapphirerapids": {"noise_pct": 20.0, "paired_noise_pct": 5.0}},
    )
    assert main(["compare", a, slow, "--quiet", "--noise", str(noise)]) == 0


def test_calibrated_run_noise_widens_its_row_and_the_flag_overrides_it(pair, tmp_path):
    """A +12% head: judged regressed on its rounds; a calibration saying whole runs of mlp
    wander by 8% makes that row inconclusive, and --run-noise-pct 0 trusts the rounds."""
    a, _, slow = pair
    from guard.stats.calibrate import save_noise

    noise = tmp_path / "noise.json"
    key = "mlp/onnxruntime/llvm -mcpu=sapphirerapids"
    save_noise(noise, "smoke", {key: {"run_noise_pct": 8.0, "runs": 5}})
    out = tmp_path / "c.json"
    assert main(["compare", a, slow, "--quiet", "--noise", str(noise), "--json", str(out)]) == 0
    cmp = json.loads(out.read_text())
    row = next(r for r in cmp["rows"] if r["model"] == "mlp")
    assert row["verdict"] == "inconclusive" and cmp["config"]["calibrated_run_noise"] == {key: 8.0}
    assert main(["compare", a, slow, "--quiet", "--noise", str(noise), "--run-noise-pct", "0"]) == 1
    assert main(["compare", a, slow, "--quiet", "--run-noise-pct", "-1"]) == 2


@pytest.mark.slow
def test_branch_baseline_picks_newest_compatible_run(tmp_path, capsys):
    """Real sqlite MLflow store: main has an old same-host run and a newer other-host run."""
    from guard.track import log_results

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(3)
    old_same = doc(result("mlp", lat(rng, factor=0.8)))
    old_same["git"] = {"commit": "a" * 40, "dirty": False, "branch": "main"}
    new_other = doc(result("mlp", lat(rng), manifest=manifest(host__threads=4)))
    new_other["git"] = {"commit": "b" * 40, "dirty": False, "branch": "main"}
    new_other["started"] = "2026-11-29T14:00:00Z"
    log_results(old_same, uri)
    log_results(new_other, uri)
    head = write(tmp_path / "head.json", doc(result("mlp", lat(rng))))
    out = tmp_path / "c.json"
    # no BASE: the baseline is branch:main by default
    code = main(["compare", head, "--tracking-uri", uri, "--json", str(out), "--quiet"])
    cmp = json.loads(out.read_text())
    assert cmp["rows"][0]["ratio"] > 1.15  # compared against the 0.8x same-host run
    assert code == 1
    # with only the incompatible run to offer, the baseline is refused with the reason
    only_other = doc(result("cnn", lat(rng), manifest=manifest(host__threads=4)))
    only_other["git"] = {"commit": "c" * 40, "dirty": False, "branch": "main"}
    log_results(only_other, uri)
    head2 = write(tmp_path / "head2.json", doc(result("cnn", lat(rng))))
    assert main(["compare", "branch:main", head2, "--tracking-uri", uri, "--quiet"]) == 2
    assert "no compatible baseline for cnn/onnxruntime" in capsys.readouterr().err


@pytest.mark.slow
def test_branch_baseline_skips_heads_own_commit(tmp_path):
    """On main, HEAD's own run is already logged: the baseline is the newest OTHER commit."""
    from guard.track import log_results

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rng = np.random.default_rng(4)
    older = doc(result("mlp", lat(rng, factor=0.8)))
    older["git"] = {"commit": "a" * 40, "dirty": False, "branch": "main"}
    head_doc = doc(result("mlp", lat(rng)))
    head_doc["git"] = {"commit": "d" * 40, "dirty": False, "branch": "main"}
    head_doc["started"] = "2026-11-29T15:00:00Z"
    log_results(older, uri)
    log_results(head_doc, uri)  # what the push to main logged: HEAD's own run, newest
    head = write(tmp_path / "head.json", head_doc)
    out = tmp_path / "c.json"
    code = main(["compare", head, "--tracking-uri", uri, "--json", str(out), "--quiet"])
    cmp = json.loads(out.read_text())
    # against itself the ratio would be 1.0; against commit a's 0.8x run it is ~1.25
    assert cmp["rows"][0]["ratio"] > 1.15 and code == 1


def test_baseline_flag(pair):
    a, a2, slow = pair
    assert main(["compare", slow, "--baseline", a, "--quiet"]) == 1
    assert main(["compare", a2, "--baseline", a, "--quiet"]) == 0


@pytest.mark.slow
def test_noise_from_the_newest_mlflow_calibration(pair, tmp_path, monkeypatch):
    from guard.stats.calibrate import log_noise, save_noise

    a, _, slow = pair
    monkeypatch.chdir(tmp_path)  # no local .guard/noise here
    uri = f"sqlite:///{tmp_path / 'noise.db'}"
    key = "mlp/onnxruntime/llvm -mcpu=sapphirerapids"
    doc = save_noise(
        tmp_path / "n.json", "smoke", {key: {"noise_pct": 20.0, "paired_noise_pct": 5.0}}
    )
    assert main(["compare", a, slow, "--quiet", "--tracking-uri", uri]) == 1  # no calibration yet
    log_noise(uri, "smoke", doc)
    assert main(["compare", a, slow, "--quiet", "--tracking-uri", uri]) == 0
