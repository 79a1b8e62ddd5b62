"""The counted verdict: two counts, comparable or not, regressed or not. No p-value.

A ``counted`` block (guard.counting.count) carries a fingerprint. Two blocks are
comparable when the fields that decide what a count means agree: the counting engine,
the emulator (and its version) and the plugin, or the hardware counter's event and CPU
(LLVM's name and its features' hash), the counting target and the inputs. Then the
per-inference counts compare exactly: a change of more than ``regress_pct`` (default
0.5%) in instructions or in bytes moved (loaded + stored) is a regression, whatever the
machine's load, because counts do not move between processes (benchmarks/counted.md).
A differing field makes them not comparable, and the row says which field. Bytes a side
did not count (null: the hardware counter counts instructions only) are not compared:
the verdict is the instructions', and the row says bytes were not counted.

The artefact hash is recorded but does not gate: a changed model or compiler is what a
comparison is for. Equal artefact hashes with different counts say the count itself moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from guard.results.counted import Counted, Fingerprint
from guard.results.documents import CountedRow

DEFAULT_COUNTED_REGRESS_PCT = 0.5
# The fingerprint fields that must agree for two counts to be comparable, in report order.
# A field absent on both sides (an emulator count has no cpu) agrees.
COMPARABLE_FIELDS = (
    "engine", "emulator", "plugin_sha256", "event", "cpu", "cpu_features", "target",
    "input_sha256",
)  # fmt: skip


def _comparable(fp: Fingerprint) -> tuple[str | None, ...]:
    """The fingerprint's COMPARABLE_FIELDS, in that order."""
    return (fp.engine, fp.emulator, fp.plugin_sha256, fp.event, fp.cpu, fp.cpu_features,
            fp.target, fp.input_sha256)  # fmt: skip


def not_comparable(base: Counted | None, head: Counted | None) -> str | None:
    """ "not comparable: FIELD differs" for the first fingerprint field that differs (a
    side without a block has the empty fingerprint)."""
    fb = base.fingerprint if base is not None else Fingerprint()
    fh = head.fingerprint if head is not None else Fingerprint()
    for name, b, h in zip(COMPARABLE_FIELDS, _comparable(fb), _comparable(fh), strict=True):
        if b != h:
            return f"not comparable: {name} differs ({b} vs {h})"
    return None


def moved(block: Counted) -> float | None:
    """Bytes moved per inference: loaded plus stored; None when the engine counted none."""
    loaded, stored = block.bytes_loaded, block.bytes_stored
    if loaded is None and stored is None:
        return None
    return float(loaded or 0) + float(stored or 0)


def _count(block: Counted | None) -> Counted | None:
    """The block; None for no block or an empty one."""
    return block if block is not None and block.to_json() else None


def _pct(head: float, base: float) -> float:
    return (head / base - 1.0) * 100.0 if base else 0.0


def compare_counted(
    base_block: Counted | None,
    head_block: Counted | None,
    regress_pct: float = DEFAULT_COUNTED_REGRESS_PCT,
) -> CountedRow:
    """One counted row: verdict (pass|regressed|improved|not comparable|missing), the
    instruction and bytes-moved changes in percent, and a one-line message; read from the
    JSON a comparison writes (its keys in this order), which ``to_json`` gives back."""
    base, head = _count(base_block), _count(head_block)
    if base is None or head is None or base.failed or head.failed:
        missing = (
            (head.error if head else None) or (base.error if base else None)
        ) or "no count on one side"
        return CountedRow.from_json(
            {"verdict": "missing", "message": f"no counted comparison: {missing}"}
        )
    why = not_comparable(base, head)
    if why is not None:
        return CountedRow.from_json({"verdict": "not comparable", "message": why})
    if base.instructions is None or head.instructions is None:
        raise KeyError("instructions")  # a block guard never writes: neither error nor count
    d_instr = _pct(float(head.instructions), float(base.instructions))
    m_base, m_head = moved(base), moved(head)
    d_bytes = None if m_base is None or m_head is None else _pct(m_head, m_base)
    changes = [d_instr] if d_bytes is None else [d_instr, d_bytes]
    worst, best = max(changes), min(changes)
    if worst > regress_pct:
        verdict = "regressed"
    elif best < -regress_pct and worst <= 0:
        verdict = "improved"
    else:
        verdict = "pass"
    same = base.fingerprint.artefact_sha256 == head.fingerprint.artefact_sha256
    bytes_part = "bytes moved not counted" if d_bytes is None else f"bytes moved {d_bytes:+.3f}%"
    message = (
        f"instructions {d_instr:+.3f}%, {bytes_part} per inference "
        f"(bound {regress_pct:g}%)" + ("; same artefact" if same else "")
    )
    return CountedRow.from_json(
        {
            "verdict": verdict,
            "instructions": [base.instructions, head.instructions],
            "bytes_moved": [m_base, m_head],
            "instructions_pct": d_instr,
            "bytes_moved_pct": d_bytes,
            "bound_pct": regress_pct,
            "same_artefact": same,
            "message": message,
        }
    )


@dataclass(frozen=True)
class CountChange:
    """A change along a history of counts: the block at ``index`` against the one at
    ``previous`` (positions in the history), as ``compare_counted`` judged it."""

    index: int
    previous: int
    row: CountedRow


def count_changes(
    blocks: Sequence[Counted | None],
    regress_pct: float = DEFAULT_COUNTED_REGRESS_PCT,
) -> list[CountChange]:
    """The changes along a history of counted blocks, oldest first: each block compared
    with the previous one that has a count (``compare_counted``, exactly), listed where
    that says regressed, improved or not comparable. Counts do not move between
    processes, so each change listed is at the very run that made it: no change-point
    detector is needed."""
    out: list[CountChange] = []
    prev: int | None = None
    for i, raw in enumerate(blocks):
        block = _count(raw)
        if block is None or block.instructions is None or block.failed:
            continue
        if prev is not None:
            row = compare_counted(blocks[prev], block, regress_pct)
            if row.verdict in ("regressed", "improved", "not comparable"):
                out.append(CountChange(i, prev, row))
        prev = i
    return out
