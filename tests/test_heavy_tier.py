"""The heavy tier (tests/conftest.py: HEAVY and the kill points kept) names tests that exist.

``pytest -m heavy`` runs exactly what HEAVY names and .ci/run leaves it out; a test renamed
or moved would silently leave the tier (and come back into every CI run) if an entry could
name nothing. The files HEAVY names are collected (all markers, so slow tests too) and
every entry must be the prefix of a collected test id; each kill point kept must be a
parameter of its test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _conftest():
    spec = importlib.util.spec_from_file_location(
        "heavy_tier_conftest", ROOT / "tests" / "conftest.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _collected(files: list[str]) -> set[str]:
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"HEAVY names files that do not exist: {missing}"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "", "-p", "no:cacheprovider",
         *files],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line.strip() for line in proc.stdout.splitlines() if "::" in line}


def test_every_heavy_entry_names_a_collected_test():
    conf = _conftest()
    kills = {
        "tests/faults/test_kill_points.py::test_kill_at_each_point": conf._KILL_KEPT,
        "tests/faults/test_kill_points_server.py::test_kill_at_each_point": conf._SERVER_KILL_KEPT,
    }
    files = sorted({e.split("::", 1)[0] for e in (*conf.HEAVY, *kills)})
    ids = _collected(files)
    dangling = [e for e in conf.HEAVY if not any(i.startswith(e) for i in ids)]
    assert not dangling, "HEAVY entries that name no test:\n" + "\n".join(dangling)
    for test, kept in kills.items():
        params = {i.split("[", 1)[1].rstrip("]") for i in ids if i.startswith(test) and "[" in i}
        assert params, f"{test} is not a parametrised test any more"
        assert set(kept) <= params, f"{test}: kept kill points {set(kept) - params} do not exist"
