"""guard's import graph keeps the shape docs/ARCHITECTURE.md describes.

Every module under guard/ is parsed (never imported) and every ``import``/``from ... import``
in it is an edge: top-level, function-level and ``if TYPE_CHECKING:`` imports alike, since a
cycle hidden inside a function is still a cycle. ``from pkg import name`` is an edge to the
submodule ``pkg.name`` when that file exists, else to ``pkg`` itself. The implicit import of
a package's ``__init__`` by its submodules is not an edge (every package would be a cycle).

Two properties are checked:

- Layer direction: a module imports only from its own layer or the ones below it
  (``LAYERS``, lowest first). The few upward edges that remain are listed in
  ``UPWARD_ALLOWED``, each with why, and a listed edge that disappears must be deleted.
- Cycles: the strongly connected components of the module graph. Each one that still
  exists is in ``CYCLES_ALLOWED`` with why; a new cycle, or a known one that grows, fails,
  and an entry whose cycle is gone must be deleted, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "guard"

# The layer table: guard's packages, lowest first. A module belongs to the layer of its
# package (the longest matching prefix); inside one layer imports go either way (cycles are
# checked separately). Every package under guard/ is in exactly one layer, and guard/ holds
# no loose modules but __init__, __main__ and a version (test_the_tree_is_the_layer_table).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("guard", "guard.core")),
    ("records", ("guard.results", "guard.manifest", "guard.zoo", "guard.track")),
    ("compiler", ("guard.compiler",)),
    ("suite", ("guard.suite",)),
    ("quantize", ("guard.quantize",)),
    ("backends", ("guard.backends", "guard.emulate")),
    ("counting", ("guard.counting",)),
    ("measure", ("guard.measure",)),
    ("stats", ("guard.stats",)),
    ("goldens", ("guard.golden",)),
    ("checks", ("guard.checks",)),
    ("documents", ("guard.compare", "guard.report")),
    ("run", ("guard.run",)),
    ("prepare", ("guard.prepare",)),
    ("experiments", ("guard.experiment",)),
    ("diagnosis", ("guard.doctor", "guard.reduce")),
    ("cli", ("guard.cli",)),
]

# Inside the compiler, the same rule over its own packages: the IR imports nothing else of
# the compiler; the reference interpreter only the IR; graph planning (view, schedule,
# memory) neither the importer nor the passes; the importer and passes never the back end
# (partitioning, code generation, tuning, the runtime and its artefact).
COMPILER_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("ir", ("guard.compiler.ir",)),
    ("reference", ("guard.compiler.reference",)),
    ("graph", ("guard.compiler.graph",)),
    ("frontend and passes", ("guard.compiler", "guard.compiler.frontend", "guard.compiler.passes")),
    (
        "back end",
        (
            "guard.compiler.partition",
            "guard.compiler.codegen",
            "guard.compiler.tuning",
            "guard.compiler.runtime",
        ),
    ),
    # the memory-budget ladder drives passes, planners and the back end (artefacts to time)
    ("fit", ("guard.compiler.fit",)),
]

# Modules allowed directly under guard/ (everything else lives in a layer's package).
TOP_LEVEL_MODULES = {"__init__", "__main__", "version"}

# (importing module, imported module) -> why the upward edge is still there.
UPWARD_ALLOWED: dict[tuple[str, str], str] = {}

# Each cycle that still exists, as the set of modules in its strongly connected component.
CYCLES_ALLOWED: dict[frozenset[str], str] = {}


def _modules(pkg: Path) -> dict[str, Path]:
    out = {}
    for path in pkg.rglob("*.py"):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(
    mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]
) -> list[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:  # relative: resolve against this module's package
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            pkg = ".".join(base + ([node.module] if node.module else []))
        else:
            pkg = node.module or ""
        names = [f"{pkg}.{a.name}" if f"{pkg}.{a.name}" in mods else pkg for a in node.names]
    out = []
    for name in names:
        if name != "guard" and not name.startswith("guard."):
            continue
        while name not in mods and "." in name:  # guard.x.attr -> guard.x
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


def import_graph(pkg: Path = PKG) -> dict[str, set[str]]:
    """Module -> the guard modules it imports, anywhere in its body."""
    mods = _modules(pkg)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[mod].update(
                    t for t in _targets(mod, path.name == "__init__.py", node, mods) if t != mod
                )
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def layer_of(mod: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int:
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and p.count(".") > depth:
                best, depth = i, p.count(".")
    assert best is not None, f"{mod} is in no layer: add it to LAYERS (and docs/ARCHITECTURE.md)"
    return best


def upward_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    up = {(a, b) for a, bs in graph.items() for b in bs if layer_of(b) > layer_of(a)}
    inside = {
        (a, b)
        for a, bs in graph.items()
        if a.startswith("guard.compiler")
        for b in bs
        if b.startswith("guard.compiler")
        and layer_of(b, COMPILER_LAYERS) > layer_of(a, COMPILER_LAYERS)
    }
    return up | inside


def _name(mod: str) -> str:
    if mod.startswith("guard.compiler"):
        return f"{mod} ({LAYERS[layer_of(mod)][0]}/{COMPILER_LAYERS[layer_of(mod, COMPILER_LAYERS)][0]})"
    return f"{mod} ({LAYERS[layer_of(mod)][0]})"


# ---------------------------------------------------------------------------- the checks


@functools.cache
def guard_graph() -> dict[str, set[str]]:
    """guard's own graph, parsed once for the three checks."""
    return import_graph()


def _packages(root: Path) -> set[str]:
    return {
        ".".join(d.relative_to(PKG.parent).parts)
        for d in root.iterdir()
        if d.is_dir() and (d / "__init__.py").is_file()
    }


def test_the_tree_is_the_layer_table():
    """The folder tree is the layer table: each package of guard/ (and of guard/compiler/)
    is named in exactly one layer, every named package exists, and no loose module sits
    beside them."""
    for root, table in ((PKG, LAYERS), (PKG / "compiler", COMPILER_LAYERS)):
        own = ".".join(root.relative_to(PKG.parent).parts)
        named = [p for _, pkgs in table for p in pkgs if p not in ("guard", own)]
        assert len(named) == len(set(named)), f"a package is in two layers: {named}"
        on_disk = _packages(root)
        assert set(named) == on_disk, (
            f"layer table and {root.relative_to(PKG.parent)}/ disagree: "
            f"not in a layer {sorted(on_disk - set(named))}, no such package {sorted(set(named) - on_disk)}"
        )
    loose = {p.stem for p in PKG.glob("*.py")} - TOP_LEVEL_MODULES
    assert not loose, (
        f"loose modules in guard/: {sorted(loose)}; move each into its layer's package"
    )


# tests/ folders that group tests by property rather than by package.
TEST_PROPERTY_FOLDERS = {
    "faults": "failures injected: kills, bad input, hostile models, damaged files",
    "fuzz": "fuzzing the readers of every document",
    "scale": "the PostgreSQL-backed server stack under load",
}


def test_tests_mirror_the_packages():
    """tests/ has one folder per package of guard/ and no other, but the property folders."""
    tests = PKG.parent / "tests"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    packages = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    assert folders - packages <= set(TEST_PROPERTY_FOLDERS), (
        f"tests/ folders that are no package of guard/: {sorted(folders - packages - set(TEST_PROPERTY_FOLDERS))}"
    )
    assert packages <= folders, (
        f"packages of guard/ without tests/<package>/: {sorted(packages - folders)}"
    )


MAX_MODULE_LINES = 450  # issue 26: a module a reader can hold; split one that grows past it


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted(PKG.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {long}"


def test_every_module_has_a_layer():
    for mod in guard_graph():
        layer_of(mod)
        if mod.startswith("guard.compiler"):
            layer_of(mod, COMPILER_LAYERS)


def test_lower_layers_never_import_upper_ones():
    up = upward_edges(guard_graph())
    new = sorted(up - set(UPWARD_ALLOWED))
    assert not new, "imports against the layer direction (docs/ARCHITECTURE.md):\n" + "\n".join(
        f"  {_name(a)} imports {_name(b)}" for a, b in new
    )
    gone = sorted(set(UPWARD_ALLOWED) - up)
    assert not gone, (
        f"these allowed upward imports are gone: delete them from UPWARD_ALLOWED: {gone}"
    )


def test_no_new_import_cycles():
    found = cycles(guard_graph())
    new = [c for c in found if c not in CYCLES_ALLOWED]
    assert not new, (
        "import cycles between guard's modules (break them along a seam):\n"
        + "\n".join("  " + " <-> ".join(sorted(c)) for c in new)
    )
    gone = [c for c in CYCLES_ALLOWED if c not in found]
    assert not gone, (
        "these allowed cycles are gone or changed: update CYCLES_ALLOWED:\n"
        + "\n".join("  " + " <-> ".join(sorted(c)) for c in gone)
    )


# ---------------------------------------------------------------------------- the checker


def _graph_of(files: dict[str, str], tmp: Path) -> dict[str, set[str]]:
    for rel, text in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return import_graph(tmp / "guard")


def test_checker_sees_function_level_relative_and_type_checking_imports(tmp_path):
    g = _graph_of(
        {
            "guard/__init__.py": "",
            "guard/a/__init__.py": "",
            "guard/a/x.py": "def f():\n    from guard.a import y\n",
            "guard/a/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from .z import Z\n",
            "guard/a/z.py": "import guard.a.x as x\nfrom guard.core.errors import GuardError\n",
            "guard/core/errors.py": "",
        },
        tmp_path,
    )
    assert g["guard.a.x"] == {"guard.a.y"}
    assert g["guard.a.y"] == {"guard.a.z"}
    assert g["guard.a.z"] == {"guard.a.x", "guard.core.errors"}
    assert cycles(g) == [frozenset({"guard.a.x", "guard.a.y", "guard.a.z"})]


def test_checker_flags_an_upward_import(tmp_path):
    g = _graph_of(
        {
            "guard/__init__.py": "",
            "guard/compiler/__init__.py": "",
            "guard/compiler/ir/__init__.py": "",
            "guard/compiler/ir/core.py": "def f():\n    from guard.backends.base import Session\n",
            "guard/backends/__init__.py": "",
            "guard/backends/base.py": "from guard.compiler.ir import core\n",
        },
        tmp_path,
    )
    assert upward_edges(g) == {("guard.compiler.ir.core", "guard.backends.base")}
    assert cycles(g) == [frozenset({"guard.compiler.ir.core", "guard.backends.base"})]
    g["guard.compiler.ir.core"] = {
        "guard.compiler.partition.plan"
    }  # inside the compiler: IR -> back end
    assert upward_edges(g) == {("guard.compiler.ir.core", "guard.compiler.partition.plan")}
