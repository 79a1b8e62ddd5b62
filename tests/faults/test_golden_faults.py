"""Goldens under faults: corrupt files are exit 2 and replaceable; unwritable dirs exit 2."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from faults_helpers import small_convnet, suite_of

from guard.cli.main import main


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["zip", "truncate", "json"])
def test_corrupt_golden_is_exit_2_and_golden_update_replaces_it(tmp_path, workdir, capsys, damage):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    assert main(["run", str(suite), "--no-track"]) == 0
    gdir = tmp_path / "goldens" / "faults" / "m"
    if damage == "zip":
        (gdir / "outputs.npz").write_bytes(b"PK\x03\x04 this is not a zip archive")
    elif damage == "truncate":
        data = (gdir / "inputs.npz").read_bytes()
        (gdir / "inputs.npz").write_bytes(data[: len(data) // 2])
    else:
        (gdir / "golden.json").write_text(json.dumps({"schema_version": 1, "inputs": 3}))
    capsys.readouterr()
    assert main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    (res,) = json.loads((tmp_path / "r.json").read_text())["results"]
    assert str(gdir) in res["error"] and "guard golden update" in res["error"]
    assert "Traceback" not in err and "internal error" not in err
    # The hint works: the update replaces the corrupt golden, and the next run passes.
    assert main(["golden", "update", str(suite), "--reason", "corrupt on disk"]) == 0
    assert main(["run", str(suite), "--no-track"]) == 0


def test_unwritable_golden_dir_is_exit_2_naming_it(tmp_path, workdir, capsys):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    gdir = tmp_path / "goldens"
    gdir.mkdir()
    root = os.geteuid() == 0
    if root:
        if (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(gdir)],
                capture_output=True,
            ).returncode
            != 0
        ):
            pytest.skip("cannot mount a read-only tmpfs")
    else:
        gdir.chmod(0o555)
    try:
        code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
        err = capsys.readouterr().err
        (res,) = json.loads((tmp_path / "r.json").read_text())["results"]
        assert code == 2 and "Traceback" not in err and "internal error" not in err
        assert "cannot write the golden" in res["error"] and "goldens" in res["error"]
    finally:
        if root:
            subprocess.run(["umount", "-l", str(gdir)], check=False)
        else:
            gdir.chmod(0o755)
