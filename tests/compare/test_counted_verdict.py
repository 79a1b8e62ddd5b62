"""guard.stats.counted: comparable counts compare exactly; a differing fingerprint says which."""

from __future__ import annotations

from typing import Any

from guard.stats.counted import compare_counted, not_comparable


def block(instructions: float, moved: float = 1000.0, **fp: str) -> dict[str, Any]:
    fingerprint = {"engine": "qemu-tcg-plugin", "emulator": "qemu-x86_64 7.2.22",
                   "plugin_sha256": "p", "target": "qemu -cpu max", "input_sha256": "i",
                   "artefact_sha256": "a", **fp}  # fmt: skip
    return {"instructions": instructions, "bytes_loaded": moved, "bytes_stored": 0.0,
            "fingerprint": fingerprint}  # fmt: skip


def test_equal_counts_pass_and_a_small_growth_regresses():
    assert compare_counted(block(1e6), block(1e6))["verdict"] == "pass"
    assert compare_counted(block(1e6), block(1e6 * 1.004))["verdict"] == "pass"
    row = compare_counted(block(1e6), block(1e6 * 1.006))
    assert row["verdict"] == "regressed" and abs(row["instructions_pct"] - 0.6) < 1e-9


def test_more_bytes_moved_alone_is_a_regression():
    assert compare_counted(block(1e6, 1000), block(1e6, 1010))["verdict"] == "regressed"


def test_fewer_instructions_and_bytes_is_an_improvement():
    assert compare_counted(block(1e6, 1000), block(9e5, 900))["verdict"] == "improved"


def test_the_bound_is_a_parameter():
    assert compare_counted(block(1e6), block(1.02e6), regress_pct=5.0)["verdict"] == "pass"


def test_a_differing_fingerprint_field_is_named_and_nothing_compared():
    row = compare_counted(block(1e6), block(2e6, emulator="qemu-x86_64 8.2.0"))
    assert row["verdict"] == "not comparable"
    assert row["message"].startswith("not comparable: emulator differs")
    assert not_comparable(block(1), block(1, target="x")) is not None


def test_a_different_artefact_is_compared_and_a_same_one_said():
    assert compare_counted(block(1e6), block(1e6, artefact_sha256="b"))["same_artefact"] is False
    assert compare_counted(block(1e6), block(1e6))["same_artefact"] is True


def test_an_error_on_either_side_is_missing():
    assert compare_counted({"error": "crashed"}, block(1))["verdict"] == "missing"
    assert compare_counted(block(1), None)["verdict"] == "missing"
