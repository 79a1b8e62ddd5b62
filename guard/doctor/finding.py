"""One finding per checklist step: status, why, evidence from both sides, what to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from guard.core.json_types import Json

OK = "ok"
SUSPECT = "suspect"
CAUSE = "cause_found"
NA = "not_applicable"
UNKNOWN = "unknown"
STATUSES = (OK, SUSPECT, CAUSE, NA, UNKNOWN)
LABELS = {
    OK: "ok",
    SUSPECT: "suspect",
    CAUSE: "cause found",
    NA: "not applicable",
    UNKNOWN: "unknown",
}


class EvidenceJson(TypedDict):
    """A fact and its value on each side, as the doctor document writes it."""

    fact: str
    base: Json
    head: Json


class FindingJson(TypedDict):
    """One step's finding in the doctor document."""

    step: int
    title: str
    status: str
    summary: str
    evidence: list[EvidenceJson]
    action: str
    missing: list[str]


@dataclass
class Evidence:
    fact: str
    base: Any = None
    head: Any = None

    def to_dict(self) -> EvidenceJson:
        return {"fact": self.fact, "base": self.base, "head": self.head}


@dataclass
class Finding:
    step: int
    title: str
    status: str = OK
    summary: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    action: str = ""
    missing: list[str] = field(default_factory=list)  # result fields that were not recorded

    def add(self, fact: str, base: Any = None, head: Any = None) -> None:
        self.evidence.append(Evidence(fact, base, head))

    def to_dict(self) -> FindingJson:
        return {
            "step": self.step,
            "title": self.title,
            "status": self.status,
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "action": self.action,
            "missing": list(self.missing),
        }


def unknown(step: int, title: str, missing: list[str], action: str = "") -> Finding:
    """A step whose facts are not recorded: names the fields, guesses nothing."""
    return Finding(
        step,
        title,
        UNKNOWN,
        f"unknown: {', '.join(missing)} not recorded",
        action=action
        or f"Re-run with a guard version and backend that record {', '.join(missing)}.",
        missing=list(missing),
    )
