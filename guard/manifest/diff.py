"""What differs between two manifests, pinned fields first.

``diff_manifests`` flattens both manifests to dotted fields (dicts are walked, lists are
leaf values) and returns {field: [a, b]} for every field that differs, a missing field
reading as null. Pinned differences come first (they are why two artefacts are not
comparable), then the rest (recorded facts: guard commit, tuning hits, paths), each group
sorted. ``sha256`` itself is left out: it differs exactly when a pin does, and says
nothing about which. Use ``is_pinned(field)`` to tell the two groups apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from guard.core.json_types import Json, JsonObject
from guard.manifest.pins import is_pinned

_SKIP = {"sha256"}


def flatten(d: Mapping[str, Json], prefix: str = "") -> JsonObject:
    """{dotted.field: leaf value}; an empty dict is kept as a leaf so it is not lost. ``d``
    is a manifest of any guard version, read as it is (unknown sections included)."""
    out: JsonObject = {}
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, name + "."))
        else:
            out[name] = v
    return out


def diff_manifests(a: Mapping[str, Json], b: Mapping[str, Json]) -> dict[str, list[Json]]:
    """{dotted field: [a value, b value]} for every differing field, pinned fields first."""
    fa, fb = flatten(a), flatten(b)
    fields = [f for f in set(fa) | set(fb) if f not in _SKIP and fa.get(f) != fb.get(f)]
    fields.sort(key=lambda f: (not is_pinned(f), f))
    return {f: [fa.get(f), fb.get(f)] for f in fields}


def _show(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def format_diff(d: Mapping[str, list[Json]]) -> str:
    """Human text: "runtime.version: 1.31.1 → 1.32.0", pinned differences first."""
    if not d:
        return "manifests match: every pinned and recorded field is equal"
    pins = [f for f in d if is_pinned(f)]
    rest = [f for f in d if not is_pinned(f)]
    lines: list[str] = []
    for title, group in (
        ("pinned (the artefacts differ in these):", pins),
        ("recorded, not pinned:", rest),
    ):
        if group:
            lines.append(title)
            lines.extend(f"  {f}: {_show(d[f][0])} → {_show(d[f][1])}" for f in sorted(group))
    return "\n".join(lines)
