"""JUnit XML: one testcase per (model, backend, check), for CI test-report viewers.

Layout: ``<testsuites>`` holding one ``<testsuite name=SUITE>``; each check of each result is
a ``<testcase name="check" classname="SUITE.model.backend">`` (``check [target]`` when the
target is not ``host``) with a ``<failure>`` (status fail), ``<error>`` (status error), or
``<skipped>`` (status skip). A result that errored without an errored check (say the build
failed before any check ran) adds one ``run`` testcase carrying the error.

Times are wall time, as CI reporters expect: a result's ``duration_s`` (build, load,
numerics and measurement of that case) is shared equally by its testcases, so the suite's
``time`` is the wall time of the cases. The file validates against tests/report/junit.xsd.
"""

from __future__ import annotations

import os
import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from guard.report import _summary as S
from guard.report._io import atomic_write_text, check_target
from guard.results.documents import ResultsDocument
from guard.results.result import Check, Result
from guard.track.records import target_key

# Characters XML 1.0 forbids even escaped; a stray one would make the whole file unreadable.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(value: Any) -> str:
    return _XML_ILLEGAL.sub("\ufffd", "" if value is None else str(value))


def _wall_seconds(result: Result) -> float:
    """The case's wall time (``duration_s``); 0 when the run did not record it."""
    seconds = S.as_number(result.duration_s)
    return seconds if seconds is not None and seconds >= 0 else 0.0


def _classname(suite: str, result: Result) -> str:
    parts = [suite, S.text(result.model, "?"), S.text(result.backend, "?")]
    return ".".join(p.replace(".", "_") for p in parts)


def _case_name(check: str, result: Result) -> str:
    target = S.text(result.target, "host")
    if target == "host":
        return check

    return f"{check} [{target if len(target) <= 64 else target_key(target)}]"


def _detail(check: Check) -> str:
    shown = (("status", check.status), ("value", check.value), ("bound", check.bound))
    lines = [f"{k}: {_clean(v)}" for k, v in shown if v is not None]
    if check.message:
        lines.append(_clean(check.message))
    return "\n".join(lines)


def to_junit(doc: ResultsDocument | Any) -> ET.Element:
    """The ``<testsuites>`` element for a results document."""
    doc = S.document(doc)
    suite_name = S.text(doc.suite, "guard")
    suite = ET.Element("testsuite", name=_clean(suite_name))
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0

    for result in doc.results:
        classname = _classname(suite_name, result)
        result_checks = result.checks
        needs_run_case = S.verdict(result) == "error" and not any(
            c.status == "error" for c in result_checks
        )
        share = _wall_seconds(result) / max(1, len(result_checks) + needs_run_case)

        def case(
            name: str,
            result: Result = result,
            cls: str = classname,
            share: float = share,
        ) -> ET.Element:
            nonlocal total_time
            counts["tests"] += 1
            total_time += share
            return ET.SubElement(
                suite,
                "testcase",
                name=_clean(_case_name(name, result)),
                classname=_clean(cls),
                time=f"{share:.6f}",
            )

        errored = False
        for check in result_checks:
            name = S.text(check.name, "check")
            el = case(name)
            status = check.status
            message = _clean(S.check_message(check))
            if status == "fail":
                counts["failures"] += 1
                f = ET.SubElement(el, "failure", message=message, type=_clean(name))
                f.text = _detail(check)
            elif status == "error":
                counts["errors"] += 1
                errored = True
                e = ET.SubElement(el, "error", message=message, type=_clean(name))
                e.text = _detail(check)
            elif status == "skip":
                counts["skipped"] += 1
                ET.SubElement(el, "skipped", message=message)
            elif status == "created":
                out = ET.SubElement(el, "system-out")
                out.text = _clean(check.message or "golden created")
        if S.verdict(result) == "error" and not errored:
            el = case("run")
            counts["errors"] += 1
            msg = _clean(S.text(result.error, "error (no message)"))
            e = ET.SubElement(el, "error", message=msg, type="error")
            e.text = _clean(result.error or "")

    attrs = {k: str(v) for k, v in counts.items()}
    attrs["time"] = f"{total_time:.6f}"
    for k, v in attrs.items():
        suite.set(k, v)
    if doc.started:
        suite.set("timestamp", _clean(doc.started))
    suite.set("hostname", _clean(socket.gethostname()))

    props: dict[str, str | bool | int | None] = {
        "git.commit": doc.git.commit,
        "git.branch": doc.git.branch,
        "git.dirty": doc.git.dirty,
        "suite_sha256": doc.suite_sha256,
        "exit_code": doc.exit_code,
    }
    if any(v is not None for v in props.values()):
        pe = ET.Element("properties")
        for name, value in props.items():
            if value is not None:
                ET.SubElement(pe, "property", name=name, value=_clean(value))
        suite.insert(0, pe)

    # The root takes the counts strict schemas allow there (Jenkins' junit-10.xsd has no
    # "skipped" on <testsuites>); skipped lives on the <testsuite>.
    root = ET.Element(
        "testsuites", {"name": "guard", **{k: v for k, v in attrs.items() if k != "skipped"}}
    )
    root.append(suite)
    return root


def dumps(doc: Any) -> str:
    root = to_junit(doc)
    ET.indent(root)
    # Declared by hand: ElementTree's declaration for encoding="unicode" names the locale's
    # encoding, which is not what atomic_write_text writes (UTF-8).
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(doc: Any, path: str | os.PathLike[str]) -> Path:
    """Write JUnit XML for the results document to ``path`` atomically; return the path."""
    check_target(path)
    return atomic_write_text(path, dumps(doc))
