"""Every file and module a docstring or comment in guard/ names exists.

A file moved or renamed leaves its old name behind in the prose around it; a newcomer who
follows such a name finds nothing. Parsed (never imported): the docstrings and comments of
every module under guard/, and the comments of its C sources. Three kinds of name:

- a path from the repository's root (``guard/run/build.py``, ``tests/...``, ``docs/...``,
  ``benchmarks/...``, ``suites/...``): it exists (a ``*`` or ``<name>`` part matches some file);
- a bare or partial source file name (``runner.c``, ``conv/schedule.py``): some file of the
  repository ends with it;
- a dotted module name (``guard.run.counted``, ``guard.counting.count.count_artefact``):
  each part is a package or module of guard, and what follows the module is a name its
  text defines or imports. A name whose second part is not a package or module of guard
  (an MLflow tag such as ``guard.level``) is not a module name.

A name that must stay although nothing holds it (another project's file, an older tree's
layout that code still accepts) is in ``NOT_HERE`` with why.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "guard"

# (file, name) -> why the name stays though no file or module of this tree holds it.
NOT_HERE: dict[tuple[str, str], str] = {
    ("guard/zoo/transformer.py", "torch/onnx/symbolic_opset9.py"): "PyTorch's exporter, quoted",
    ("guard/zoo/transformer.py", "symbolic_opset9.py"): "PyTorch's exporter, quoted",
    ("guard/stats/regress.py", "asv/commands/compare.py"): "asv's source, quoted",
    ("guard/experiment/ab_worker.py", "guard.emulate.counted"): (
        "where an older side's tree keeps CountedConfig; the worker imports it there"
    ),
    ("guard/experiment/ab_worker.py", "guard/pipeline.py"): (
        "where an older side's tree keeps prepare_cases; the worker imports it there"
    ),
}

ROOTED = re.compile(r"(?<![\w./-])((?:guard|tests|docs|benchmarks|suites)/[\w./*<>-]*[\w*>])")
SOURCE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.(?:py|c|j2))\b")
DOTTED = re.compile(r"(?<![\w./-])(guard(?:\.\w+)+)")


def _repo_files() -> list[str]:
    """The repository's files, outside hidden folders (.git, .venv, caches) and __pycache__."""
    out = []
    for p in ROOT.rglob("*"):
        rel = p.relative_to(ROOT)
        if any(x.startswith(".") or x == "__pycache__" for x in rel.parts[:-1]):
            continue
        if p.is_file():
            out.append(rel.as_posix())
    return out


def _pattern(name: str) -> re.Pattern[str]:
    """A repository path, its ``*`` and ``<name>`` parts matching one path part each; a
    folder matches the files under it."""
    parts = re.split(r"(\*|<[^>]*>)", name)
    body = "".join("[^/]+" if p == "*" or p.startswith("<") else re.escape(p) for p in parts)
    return re.compile(f"^{body}(/.*)?$")


def _prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a Python file, every comment of C."""
    src = path.read_text(encoding="utf-8")
    if path.suffix == ".c":
        return [
            (src.count("\n", 0, m.start()) + 1, m.group(0))
            for m in re.finditer(r"/\*.*?\*/|//[^\n]*", src, re.S)
        ]
    out = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(src).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                out.append((node.body[0].lineno, doc))
    return out


def _module_resolves(name: str) -> bool | None:
    """True/False for a dotted name of guard's; None when it is no module name at all."""
    parts = name.split(".")
    here = PKG
    for i, part in enumerate(parts[1:], start=1):
        if (here / part / "__init__.py").is_file():
            here = here / part
            continue
        module = here / f"{part}.py"
        if module.is_file():
            text = module.read_text(encoding="utf-8")
            return all(re.search(rf"\b{re.escape(p)}\b", text) for p in parts[i + 1 : i + 2])
        if i == 1:
            return None  # guard.level, guard.arch: MLflow tags, not modules
        init = (here / "__init__.py").read_text(encoding="utf-8")
        return re.search(rf"\b{re.escape(part)}\b", init) is not None
    return True


def _dangling() -> list[tuple[str, int, str]]:
    files = _repo_files()
    out = []
    sources = sorted([*PKG.rglob("*.py"), *PKG.rglob("*.c")])
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        for line, text in _prose(path):
            names: list[tuple[str, bool]] = []
            rooted = ROOTED.findall(text)
            for p in rooted:
                p = p.rstrip(".")
                ok = (ROOT / p).exists() or any(_pattern(p).match(f) for f in files)
                names.append((p, ok))
            for p in SOURCE.findall(text):
                if any(p in r for r in rooted):
                    continue
                names.append((p, any(f == p or f.endswith("/" + p) for f in files)))
            for p in DOTTED.findall(text):
                ok = _module_resolves(p)
                if ok is not None:
                    names.append((p, ok))
            out.extend((rel, line, name) for name, ok in names if not ok)
    return out


def test_every_file_and_module_named_in_guard_exists():
    dangling = _dangling()
    new = [f"{rel}:{line}: {name}" for rel, line, name in dangling if (rel, name) not in NOT_HERE]
    assert not new, "names of nothing in this tree:\n" + "\n".join(new)
    # An entry whose name now resolves, or that its file no longer says, is deleted.
    stale = set(NOT_HERE) - {(rel, name) for rel, _, name in dangling}
    assert not stale, f"NOT_HERE entries that name something now, or nothing: {sorted(stale)}"
