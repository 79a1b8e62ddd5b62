"""Every document guard reads is a regular file under a size limit (issue 16 item 6)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from guard.core.fsutil import MAX_DOCUMENT_BYTES, BoundedReadError, read_bounded


def _hostile(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_DOCUMENT_BYTES + 1)  # sparse: no disk used
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    return {"fifo": fifo, "zero": Path("/dev/zero"), "big": big, "loop": loop, "dir": tmp_path}


def test_read_bounded_refuses_what_is_not_a_small_regular_file(tmp_path):
    reasons = {}
    for name, p in _hostile(tmp_path).items():
        with pytest.raises(BoundedReadError) as info:
            read_bounded(p)
        reasons[name] = info.value.reason
    assert "not a regular file" in reasons["fifo"] and "not a regular file" in reasons["zero"]
    assert "over guard's limit" in reasons["big"] and "symlink loop" in reasons["loop"]
    assert "directory" in reasons["dir"]
    ok = tmp_path / "ok.json"
    ok.write_text("{}")
    assert read_bounded(ok) == b"{}"
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "argv",
    [
        ["manifest", "diff", "{p}", "{p}"],
        ["compare", "{p}", "{p}"],
        ["track", "push", "{p}", "--tracking-uri", "sqlite:///{tmp}/x.db"],
        ["run", "{suite}", "--no-track", "--baseline", "{p}"],
    ],
)
@pytest.mark.slow
def test_commands_refuse_hostile_documents_in_one_line(tmp_path, argv):
    # In a subprocess with a timeout: a regression would block on the FIFO or eat memory.
    suite = tmp_path / "s.yaml"
    suite.write_text("schema_version: 1\nsuite: s\nmodels: [{name: m, source: m.onnx}]\n")
    for name, p in _hostile(tmp_path).items():
        args = [a.format(p=p, tmp=tmp_path, suite=suite) for a in argv]
        proc = subprocess.run(
            [sys.executable, "-m", "guard.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )
        assert proc.returncode == 2, (name, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, name
        errors = [line for line in proc.stderr.splitlines() if line.startswith("guard: error:")]
        assert len(errors) == 1 and str(p) in errors[0], (name, proc.stderr)
