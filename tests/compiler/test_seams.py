"""The compiler's seams: guard/compiler never reaches into guard/backends, and the plan /
runtime / partition report split has no import cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

COMPILER = Path(__file__).parents[2] / "guard" / "compiler"


def _imports(path: Path) -> set[str]:
    mods: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module)
    return mods


def test_compiler_never_imports_backends():
    offenders = {
        str(p.relative_to(COMPILER)): sorted(
            m for m in _imports(p) if m.startswith("guard.backends")
        )
        for p in COMPILER.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_runtime_does_not_import_partitioning_or_planning():
    # The runtime reads frozen plans; it neither partitions nor plans.
    mods = _imports(COMPILER / "runtime" / "engine.py")
    assert "guard.compiler.partition.assign" not in mods and "guard.compiler.graph.memory" in mods
    src = (COMPILER / "runtime" / "engine.py").read_text()
    assert "plan_memory" not in src and "partition(" not in src


def test_each_module_imports_on_its_own():
    # A cycle shows up as an ImportError when the module is the first one imported.
    for mod in (
        "partition.plan",
        "runtime.engine",
        "partition.assign",
        "runtime.weights",
        "runtime.artefact",
    ):
        subprocess.run(
            [sys.executable, "-c", f"import guard.compiler.{mod}"], check=True, timeout=60
        )
