"""guard.counting.verdict: comparable counts compare exactly; a differing fingerprint says which."""

from __future__ import annotations

from guard.counting.verdict import compare_counted, not_comparable
from guard.results.counted import Counted


def block(instructions: float, moved: float = 1000.0, **fp: str) -> Counted:
    fingerprint = {"engine": "qemu-tcg-plugin", "emulator": "qemu-x86_64 7.2.22",
                   "plugin_sha256": "p", "target": "qemu -cpu max", "input_sha256": "i",
                   "artefact_sha256": "a", **fp}  # fmt: skip
    return Counted.from_json({"instructions": instructions, "bytes_loaded": moved,
                              "bytes_stored": 0.0, "fingerprint": fingerprint})  # fmt: skip


def test_equal_counts_pass_and_a_small_growth_regresses():
    assert compare_counted(block(1e6), block(1e6)).verdict == "pass"
    assert compare_counted(block(1e6), block(1e6 * 1.004)).verdict == "pass"
    row = compare_counted(block(1e6), block(1e6 * 1.006))
    assert row.verdict == "regressed" and abs((row.instructions_pct or 0) - 0.6) < 1e-9


def test_more_bytes_moved_alone_is_a_regression():
    assert compare_counted(block(1e6, 1000), block(1e6, 1010)).verdict == "regressed"


def test_fewer_instructions_and_bytes_is_an_improvement():
    assert compare_counted(block(1e6, 1000), block(9e5, 900)).verdict == "improved"


def test_the_bound_is_a_parameter():
    assert compare_counted(block(1e6), block(1.02e6), regress_pct=5.0).verdict == "pass"


def test_a_differing_fingerprint_field_is_named_and_nothing_compared():
    row = compare_counted(block(1e6), block(2e6, emulator="qemu-x86_64 8.2.0"))
    assert row.verdict == "not comparable"
    assert row.message.startswith("not comparable: emulator differs")
    assert not_comparable(block(1), block(1, target="x")) is not None


def test_a_different_artefact_is_compared_and_a_same_one_said():
    assert compare_counted(block(1e6), block(1e6, artefact_sha256="b")).same_artefact is False
    assert compare_counted(block(1e6), block(1e6)).same_artefact is True


def test_an_error_on_either_side_is_missing():
    assert compare_counted(Counted.from_json({"error": "crashed"}), block(1)).verdict == "missing"
    assert compare_counted(block(1), None).verdict == "missing"


def pmu_block(instructions: float, **fp: str) -> Counted:
    """A hardware-counter count: instructions only, bytes null."""
    fingerprint = {"engine": "perf_event_open", "event": "instructions:u", "cpu": "neoverse-n1",
                   "cpu_features": "f", "cpu_model": "m", "kernel": "k", "target": "t",
                   "input_sha256": "i", "artefact_sha256": "a", **fp}  # fmt: skip
    return Counted.from_json({"engine": "perf_event_open", "instructions": instructions,
                              "bytes_loaded": None, "bytes_stored": None,
                              "fingerprint": fingerprint})  # fmt: skip


def test_hardware_counts_without_bytes_are_judged_on_instructions():
    row = compare_counted(pmu_block(1e6), pmu_block(1.006e6))
    assert row.verdict == "regressed" and row.bytes_moved_pct is None
    assert row.bytes_moved == (None, None)
    assert "bytes moved not counted" in row.message
    assert compare_counted(pmu_block(1e6), pmu_block(1e6)).verdict == "pass"
    assert compare_counted(pmu_block(1e6), pmu_block(9e5)).verdict == "improved"


def test_an_emulator_count_and_a_hardware_count_are_not_comparable():
    row = compare_counted(block(1e6), pmu_block(1e6))
    assert row.verdict == "not comparable"
    assert row.message.startswith("not comparable: engine differs")


def test_hardware_counts_of_two_cpus_are_not_comparable_the_kernel_is_recorded_only():
    assert "cpu differs" in compare_counted(pmu_block(1e6), pmu_block(1e6, cpu="znver5")).message
    assert "cpu_features differs" in str(
        not_comparable(pmu_block(1), pmu_block(1, cpu_features="g"))
    )
    assert not_comparable(pmu_block(1), pmu_block(1, kernel="6.1", cpu_model="other")) is None


def test_readers_of_a_count_without_bytes_say_so():
    from guard.checks.evaluate import counted_check, counted_summary
    from guard.compare.crossarch import _counted_pair, counted_cell
    from guard.counting.rows import markdown_lines
    from guard.results.cross_arch import CrossArchRow
    from guard.results.documents import CountedRow
    from guard.results.result import Result

    assert counted_summary(pmu_block(41.2e6)) == "41.2 M instructions (bytes: not counted)"
    check = counted_check(
        pmu_block(1.01e6),
        compare_counted(pmu_block(1e6), pmu_block(1.01e6)),
        0.5,
    )
    assert check.status == "fail" and "bytes moved not counted" in check.message
    row = {"model": "m", "backend": "b", "target": "t",
           **compare_counted(pmu_block(1e6), pmu_block(1e6)).to_json()}  # fmt: skip
    (line,) = [x for x in markdown_lines([CountedRow.from_json(row)]) if x.startswith("| m [b]")]
    assert "| - → - | - |" in line, line
    pair = _counted_pair(
        Result.from_json({"counted": pmu_block(1e6).to_json()}),
        Result.from_json({"counted": pmu_block(2e6).to_json()}),
    )
    assert pair is not None and pair["bytes_moved"] == [None, None]
    assert (
        counted_cell(CrossArchRow.from_json({"counted": pair}))
        == "; counted 1 M / 2 M instructions per inference"
    )
