"""guard's start-up imports nothing heavy (issue 28 item 11): `guard --help` took 1.96 s
because every command imported MLflow, pandas, scipy and the backends before parsing its
arguments, and a Ctrl-C in those seconds printed a traceback through the import chain.

Each command imports what it uses when it runs; parsing (``--help``, a bad flag) must not.
Speed is not asserted here (a shared runner's timings are noise): the modules are, and
they are what the 0.3 s depends on. One interpreter walks every command's ``--help`` and
names the first one after which a heavy module is loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

from guard.cli.main import COMMANDS

# Modules that cost tenths of a second to seconds each to import.
HEAVY = ("mlflow", "pandas", "onnxruntime", "tvm", "numpy", "scipy", "onnx", "llvmlite",
         "sklearn", "plotly", "ruptures", "rich", "yaml", "jinja2", "sqlalchemy")  # fmt: skip

_PROBE = """
import contextlib, io, json, sys
from guard.cli.main import main
heavy = {heavy!r}
seen = {{}}
for argv in {argvs!r}:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    loaded = [m for m in heavy if m in sys.modules]
    if loaded:
        seen[" ".join(argv)] = loaded
        break
print(json.dumps(seen))
"""


def _heavy_after(argvs: list[list[str]]) -> dict[str, list[str]]:
    code = _PROBE.format(heavy=HEAVY, argvs=argvs)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_help_imports_nothing_heavy():
    argvs = [["--help"]] + [[c, "--help"] for c in COMMANDS]
    assert _heavy_after(argvs) == {}


def test_a_bad_flag_imports_nothing_heavy():
    assert _heavy_after([["run", "--no-such-flag"], ["compare", "--no-such-flag"]]) == {}


def test_the_probe_sees_a_heavy_import():
    """The check can fail: a command that imports numpy when it runs is seen."""
    assert _heavy_after([["zoo", "list"]])  # zoo list builds the zoo's descriptions
