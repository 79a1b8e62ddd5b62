"""Issue 27 low items: a kill mid-write leaves no ``.r.json.*.tmp`` for good, and a full
disk is reported with the path and the bytes the write needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from guard.core import fault
from guard.core.fsutil import DiskFullError, atomic_write_bytes, atomic_write_text
from guard.report.outputs import write_reports

_KILLED_WRITE = (
    "import sys; from guard.core.fsutil import atomic_write_text; "
    "atomic_write_text(sys.argv[1], 'half')"
)


def test_a_temporary_file_left_by_a_kill_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "r.json"
    env = {**os.environ, fault.ENV: "atomic_write:r.json"}
    done = subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(target)], env=env, timeout=60)
    assert done.returncode == -9
    left = list(tmp_path.glob(".r.json.*.tmp"))
    assert len(left) == 1 and not target.exists()  # killed between the write and the rename
    # A temporary file of a live writer is its own: left alone.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".r.json.{live.pid}-abcd.tmp"
        busy.write_text("in progress")
        atomic_write_text(target, "whole")
        assert target.read_text() == "whole"
        assert list(tmp_path.glob(".r.json.*.tmp")) == [busy]
    finally:
        live.kill()
        live.wait()


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    if os.geteuid() != 0:
        return False
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    return subprocess.run(cmd, capture_output=True).returncode == 0


def test_a_full_disk_names_the_path_and_the_bytes_needed(tmp_path):
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "64k"):
        pytest.skip("needs root to mount a size-limited tmpfs")
    try:
        target = disk / "r.json"
        with pytest.raises(DiskFullError) as info:
            atomic_write_bytes(target, b"x" * 300_000)
        msg = str(info.value)
        assert str(target) in msg and "300000 bytes needed" in msg and " free" in msg
        assert not list(disk.iterdir())  # nothing half written, no temporary file
        doc = {"schema_version": 1, "suite": "s", "results": [], "pad": "x" * 300_000}
        [line] = write_reports(doc, {"--json": target})
        assert str(target) in line and "bytes needed" in line
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
