"""Fuzzing the documents guard reads: suite YAML and results files, mutated by hypothesis.

Where fuzz_harness.py runs whole ``guard run``s on a mutated suite and model (seconds a
case), this harness exercises only the readers, so that hundreds of cases take a minute:

- a suite file: ``load_suite`` (what ``guard run`` and every suite command call first);
- a results file: ``guard compare BASE HEAD`` and ``guard merge SHARD SHARD``, through the
  real command line, in this process.

The mutations are fuzz_harness's: key-path edits (a value replaced by a hostile one, a key
removed or added) and text damage (byte flips, truncation, spliced YAML constructs, alias
bombs, deep nesting), applied to a valid suite or results document. The contract checked
on each case (``violations``): the exit code is 0, 1 or 2, never 3; a 2 comes with exactly
one ``guard: error:`` line and no traceback; the case ends within ``CASE_TIMEOUT_S`` (an
in-process watchdog: SIGALRM raises in the reader).

``python tests/fuzz/documents_harness.py --cases 400`` prints the numbers (cases tried,
exit codes, exit-3 count) that benchmarks/faults_fuzz.md records.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "compare"))

from compare_fixtures import doc as results_doc  # noqa: E402
from compare_fixtures import result  # noqa: E402
from fuzz_harness import _dump, base_suite, suite_edits, text_damage  # noqa: E402

from guard.cli.main import main  # noqa: E402
from guard.core.errors import GuardError  # noqa: E402
from guard.suite import load_suite  # noqa: E402

CASE_TIMEOUT_S = 30.0
KINDS = ("suite", "compare", "merge")


class Hang(BaseException):
    """Raised by the watchdog in a reader that ran past CASE_TIMEOUT_S."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Outcome:
    kind: str
    rc: int | None  # None: it hung
    stderr: str
    seconds: float


def violations(out: Outcome) -> list[str]:
    """How an outcome breaks the contract (empty when it keeps it)."""
    why: list[str] = []
    if out.rc is None:
        why.append(f"no answer within {CASE_TIMEOUT_S:g} s")
    elif out.rc not in (0, 1, 2):
        why.append(f"exit {out.rc}")
    if "Traceback" in out.stderr or "internal error" in out.stderr:
        why.append("a traceback or internal error")
    if out.rc == 2:
        errors = [x for x in out.stderr.splitlines() if x.startswith("guard: error:")]
        if len(errors) != 1:
            why.append(f"{len(errors)} 'guard: error:' lines for exit 2")
    return why


def _suite_rc(path: Path) -> tuple[int, str]:
    """``load_suite`` with guard.cli.main's mapping of exceptions to exit codes."""
    try:
        load_suite(path)
    except GuardError as exc:
        return exc.exit_code, f"guard: error: {exc}"
    except Exception as exc:  # noqa: BLE001 - what main would report as exit 3
        return 3, f"guard: internal error: {type(exc).__name__}: {exc}"
    return 0, ""


def run_case(kind: str, data: bytes, root: Path) -> Outcome:
    """Read the mutated document ``data`` as ``kind`` in a fresh directory under ``root``."""
    d = Path(tempfile.mkdtemp(dir=root))
    err = io.StringIO()
    t0 = time.monotonic()
    rc: int | None
    try:
        with watchdog(CASE_TIMEOUT_S), contextlib.redirect_stderr(err):
            with contextlib.redirect_stdout(io.StringIO()):
                if kind == "suite":
                    (d / "model.onnx").write_bytes(b"")
                    (d / "suite.yaml").write_bytes(data)
                    rc, line = _suite_rc(d / "suite.yaml")
                    print(line, file=sys.stderr)
                elif kind == "compare":
                    (d / "base.json").write_text(json.dumps(_results()))
                    (d / "head.json").write_bytes(data)
                    rc = main(["compare", str(d / "base.json"), str(d / "head.json")])
                else:
                    one, two = _shards()
                    (d / "s1.json").write_bytes(data)
                    (d / "s2.json").write_text(json.dumps(two))
                    rc = main(["merge", str(d / "s1.json"), str(d / "s2.json"), "--quiet"])
    except Hang:
        rc = None
    return Outcome(kind, rc, err.getvalue(), time.monotonic() - t0)


def _samples(seed: int) -> list[float]:
    return [float(x) for x in 10.0 + np.random.default_rng(seed).standard_normal(20) * 0.1]


def _results() -> dict[str, Any]:
    return results_doc(result("a", np.array(_samples(0))), result("b", np.array(_samples(1))))


def _shards() -> tuple[dict[str, Any], dict[str, Any]]:
    cases = [["a", "onnxruntime", "host"], ["b", "onnxruntime", "host"]]
    out = []
    for i, name in enumerate(("a", "b"), start=1):
        d = results_doc(result(name, np.array(_samples(i))))
        d["exit_code"] = 0
        d["shard"] = {"index": i, "count": 2, "plan_sha256": "p", "invocation_id": "inv",
                      "suite_cases": cases}  # fmt: skip
        out.append(d)
    return out[0], out[1]


def _json(doc: Any) -> str:
    return json.dumps(doc, default=str)


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, bytes): a valid document of ``kind``, edited by key path or damaged as text."""
    kind = draw(st.sampled_from(KINDS))
    if kind == "suite":
        valid: Any = base_suite()
        dump = _dump
    else:
        valid = _results() if kind == "compare" else _shards()[0]
        dump = _json
    how = draw(st.sampled_from(["edit", "edit", "damage", "both"]))
    doc = copy.deepcopy(valid)
    if how in ("edit", "both"):
        doc = draw(suite_edits(doc))
    text = dump(doc)
    if how in ("damage", "both"):
        return kind, draw(text_damage(text))
    return kind, text.encode("utf-8")


@dataclass
class DocReport:
    cases: int = 0
    exits: Counter = field(default_factory=Counter)  # (kind, rc) -> count
    breaches: list[tuple[str, str, list[str]]] = field(default_factory=list)
    slowest_s: float = 0.0

    def exit3(self) -> int:
        return sum(n for (_, rc), n in self.exits.items() if rc == 3)

    def summary(self) -> str:
        by = ", ".join(f"{k} exit {rc}: {n}" for (k, rc), n in sorted(self.exits.items(), key=str))
        return (
            f"{self.cases} cases, {self.exit3()} exit 3, {len(self.breaches)} breaches, "
            f"slowest {self.slowest_s:.1f} s ({by})"
        )


def fuzz_documents(cases: int, root: Path) -> DocReport:
    """Run ``cases`` mutated documents (derandomized: the same cases every time)."""
    report = DocReport()

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        kind, blob = data.draw(documents())
        out = run_case(kind, blob, root)
        report.cases += 1
        report.exits[(kind, out.rc)] += 1
        report.slowest_s = max(report.slowest_s, out.seconds)
        why = violations(out)
        if why:
            report.breaches.append((kind, out.stderr[-500:], why))

    one()
    return report


def main_cli() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=400)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="guard-docfuzz-") as root:
        t0 = time.monotonic()
        report = fuzz_documents(args.cases, Path(root))
    print(f"documents fuzz: {report.summary()} in {time.monotonic() - t0:.0f} s")
    for kind, err, why in report.breaches[:20]:
        print(f"  {kind}: {'; '.join(why)}: {err.strip()[:300]}")
    return 1 if report.breaches else 0


if __name__ == "__main__":
    sys.exit(main_cli())
