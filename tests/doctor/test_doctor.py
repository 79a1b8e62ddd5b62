"""guard doctor on real causes: each pair differs in one thing and fails one step.

Results come from real `guard run`s of small models where that is cheap (partitions,
layout, onnxruntime options); facts that only their shape matters for (tuning-cache
look-ups, arena size against a given cache hierarchy, per-kernel times) are set on copies
of real results.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from doctor_fixtures import conv_net, fake_sysfs, finding, run_one, variant

from guard.cli.main import main
from guard.doctor import SCHEMA_VERSION
from guard.doctor import diagnose as diagnose_docs
from guard.doctor.facts import fits_in, host_caches
from guard.doctor.render import to_markdown
from guard.doctor.steps_tuning import target_difference
from guard.results.documents import ResultsDocument
from guard.results.result import Result


def diagnose(head: dict, base: dict | None = None, **kwargs) -> dict:
    """The doctor on two fixture documents, read as guard reads a results file."""
    typed = ResultsDocument.from_json(base) if base is not None else None
    return diagnose_docs(ResultsDocument.from_json(head), typed, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Real runs: the conv net on gpu-lite with and without an LRN, and with a Softmax in
    the middle of its conv region (on the native backend)."""
    t = tmp_path_factory.mktemp("doctor-runs")
    runs = {
        "base": run_one(t, "base", conv_net(), profile="gpu-lite"),
        "lrn": run_one(t, "lrn", conv_net("LRN"), profile="gpu-lite"),
        "native": run_one(t, "native", conv_net()),
        "softmax": run_one(t, "softmax", conv_net("Softmax")),
        "instnorm": run_one(t, "instnorm", conv_net("InstanceNormalization")),
        "ort": run_one(t, "ort", conv_net(), backends=["onnxruntime"]),
        "ort_off": run_one(
            t,
            "ort_off",
            conv_net(),
            backends=["onnxruntime"],
            options={"onnxruntime": {"graph_optimization_level": "disabled"}},
        ),
    }
    # Speed is not asserted in tests: a shared 2-core machine's p50s swing by 2x. Each head
    # stands for the slowdown it causes; its p50 is set, the rest of every result is real.
    for name, doc in runs.items():
        p50 = 1.3 if name in ("lrn", "softmax", "ort_off", "instnorm") else 1.0
        # Rounds that agree within 2%: a 30% slowdown is well above what that noise hides.
        runs[name] = variant(doc, **{"latency_ms.p50": p50, "noise_pct": 2.0})
    # The native build as a head 30% slower: what a difference set on a copy explains.
    runs["slow"] = variant(runs["native"], **{"latency_ms.p50": 1.3})
    return runs


def test_fallback_for_one_op_names_the_op_and_node_in_step3(runs: dict[str, dict]) -> None:
    doc = diagnose(runs["lrn"], runs["base"])
    case = doc["cases"][0]
    f3 = finding(doc, 3)
    assert f3["status"] == "cause_found"
    assert "LRN" in f3["summary"] and "'lrn_mid'" in f3["summary"]
    assert "excluded by gpu-lite" in f3["summary"]  # the decline reason, from the artefact
    counts = next(e for e in f3["evidence"] if e["fact"] == "partition count")
    assert (counts["base"], counts["head"]) == (1, 3)
    assert case["first_cause"] == 3  # earlier steps do not claim it
    assert finding(doc, 1)["status"] in ("ok", "suspect")
    f2 = finding(doc, 2)  # one more node on the fallback: the reference interpreter
    assert f2["status"] == "suspect" and "cpu: the reference interpreter" in f2["summary"]
    assert "guard reduce" in finding(doc, 11)["action"]


def test_an_op_the_code_generator_declines_is_named_in_step3(runs: dict[str, dict]) -> None:
    doc = diagnose(runs["instnorm"], runs["native"])
    f3 = finding(doc, 3)
    assert f3["status"] == "cause_found" and doc["cases"][0]["first_cause"] == 3
    assert "InstanceNormalization node 'instnorm_mid'" in f3["summary"]
    assert "native: no emitter for InstanceNormalization" in f3["summary"]


def test_single_run_health_names_the_split_of_a_failing_partitions_check(runs) -> None:
    doc = diagnose(runs["lrn"])
    assert doc["base"] is None
    f3 = finding(doc, 3)
    assert f3["status"] == "cause_found" and "lrn_mid" in f3["summary"]
    assert all(e["base"] is None for e in f3["evidence"])
    healthy = diagnose(runs["base"])
    assert healthy["cases"][0]["first_cause"] is None
    assert finding(healthy, 3)["status"] == "ok"


def test_a_layout_bound_op_in_a_conv_region_is_step5(runs: dict[str, dict]) -> None:
    doc = diagnose(runs["softmax"], runs["native"])
    f5 = finding(doc, 5)
    assert f5["status"] == "cause_found"
    conv = next(e for e in f5["evidence"] if e["fact"].startswith("layout conversions"))
    assert conv["head"] > conv["base"]
    # The region whose boundary the Softmax forced is named, with the value leaving it.
    assert any(e["fact"] == "region" and "'r2'" in str(e["head"]) for e in f5["evidence"])
    assert doc["cases"][0]["first_cause"] == 5
    assert finding(doc, 3)["status"] == "ok" and finding(doc, 2)["status"] == "ok"
    # the results count the conversions left in the final graph; step 3 shows both sides
    base = runs["native"]["results"][0]["layout_conversions"]
    head = runs["softmax"]["results"][0]["layout_conversions"]
    assert isinstance(base, int) and head > base
    lc = next(e for e in finding(doc, 3)["evidence"] if e["fact"] == "layout conversions")
    assert (lc["base"], lc["head"]) == (base, head)


def test_onnxruntime_optimisations_off_on_one_side_is_step9(runs: dict[str, dict]) -> None:
    doc = diagnose(runs["ort_off"], runs["ort"])
    f9 = finding(doc, 9)
    assert f9["status"] == "cause_found"
    assert "graph_optimization_level all -> disabled" in f9["summary"]
    # The optimised graphs (read from the artefacts) show what the level switched off.
    f4 = finding(doc, 4)
    assert f4["status"] == "cause_found" and "fusion lost" in f4["summary"]
    assert "model.opt.onnx" in str(f4["evidence"])
    # ORT's NCHWc Conv swapped for a plain Conv is a kernel choice; the Relus it had fused
    # are what the lost fusion left behind.
    assert "Relu 0->6" in f4["summary"] and "kernels swapped" in f4["summary"]
    # onnxruntime records no per-node layout in the results: the artefact's graph is read.
    assert finding(doc, 5)["status"] in ("ok", "cause_found")
    back = finding(diagnose(runs["ort"], runs["ort_off"]), 9)
    assert back["status"] == "ok" or back["status"] == "suspect"


def test_a_head_that_got_faster_is_not_claimed_as_a_slowdown(runs: dict[str, dict]) -> None:
    faster = variant(runs["softmax"], **{"latency_ms.p50": 0.6})
    doc = diagnose(faster, runs["native"])
    f5 = finding(doc, 5)
    assert f5["status"] == "suspect" and "head is faster (0.60x)" in f5["summary"]
    assert doc["cases"][0]["first_cause"] is None
    # A failing partitions check stays a cause however fast the head is.
    lrn_fast = variant(runs["lrn"], **{"latency_ms.p50": 0.6})
    assert finding(diagnose(lrn_fast, runs["base"]), 3)["status"] == "cause_found"


def test_same_build_twice_finds_no_cause(runs: dict[str, dict]) -> None:
    doc = diagnose(runs["native"], runs["native"])
    statuses = {f["step"]: f["status"] for f in doc["cases"][0]["findings"]}
    assert doc["cases"][0]["first_cause"] is None
    assert statuses[6] == "not_applicable"
    # The bundled results carry the generated kernels' profile; onnxruntime's carry the
    # top nodes from its own profiler.
    assert statuses[10] in ("ok", "suspect")
    assert "result kernels" in str(finding(doc, 10)["evidence"])
    ort = finding(diagnose(runs["ort"], runs["ort"]), 10)
    assert ort["status"] in ("ok", "suspect")
    assert "result kernels (onnxruntime profiler)" in str(ort["evidence"])
    assert "(Conv)" in str(ort["evidence"]), ort["evidence"]
    unprofiled = variant(runs["ort"], kernels=None)
    f10 = finding(diagnose(unprofiled, unprofiled), 10)
    assert f10["status"] == "unknown"  # not recorded: said, not guessed
    assert "kernels" in f10["summary"]


def test_a_measurement_not_like_for_like_is_step1(runs: dict[str, dict]) -> None:
    head = variant(runs["native"], **{"manifest.host.threads": 2})
    doc = diagnose(head, runs["native"])
    f1 = finding(doc, 1)
    assert f1["status"] == "cause_found" and "threads differ (1 vs 2)" in f1["summary"]
    assert doc["cases"][0]["first_cause"] == 1
    contended = variant(runs["native"], **{"measurement.contention": 0.6})
    f1c = finding(diagnose(contended, runs["native"]), 1)
    assert f1c["status"] == "suspect" and "60% of the spare CPU" in f1c["summary"]
    # A measurement problem is fixed by measuring again, not with a reproducer.
    assert finding(diagnose(contended, runs["native"]), 11)["status"] == "not_applicable"


def test_a_shape_left_dynamic_after_binding_is_step7(runs: dict[str, dict]) -> None:
    split = {
        "node": "reshape_dyn",
        "op": "Reshape",
        "backend": "cpu",
        "declined": {"native": "dynamic axes in 'r7' ['N', 16]"},
    }
    head = variant(runs["slow"], **{"partitions.splits": [split], "partitions.count": 3})
    f7 = finding(diagnose(head, runs["native"]), 7)
    assert f7["status"] == "cause_found" and "dynamic" in f7["summary"]
    assert any("reshape_dyn" in e["fact"] for e in f7["evidence"])
    # The conv net's own dims are static, read from its file through the suite it ran in.
    ok = finding(diagnose(runs["native"]), 7)
    assert ok["status"] == "ok" and ok["missing"] == []
    assert any(
        e["fact"] == "dynamic dims declared by the model" and e["head"] == "none"
        for e in ok["evidence"]
    )


# -- tuning cache (step 6): both shapes of manifest.tuning_cache ---------------------------

ZEN4 = "llvm -mattr=+avx2,+avx512f -mcpu=znver4 -mtriple=x86_64-linux-gnu"
SPR = "llvm -mattr=+amx-tile,+avx2,+avx512f -mcpu=sapphirerapids -mtriple=x86_64-linux-gnu"


def test_cache_tuned_for_another_target_is_step6_tvm_shape(runs: dict[str, dict]) -> None:
    cache = {"path": "/db", "sha256": "ab" * 32, "entries": 6}
    base = variant(
        runs["native"],
        **{
            "manifest.target.canonical": ZEN4,
            "manifest.tuning_cache": {
                **cache,
                "hits": 6,
                "misses": 0,
                "missed": [],
                "misses_tuned_for_other_target": 0,
            },
        },
    )
    head = variant(
        runs["slow"],
        **{
            "manifest.target.canonical": SPR,
            "manifest.tuning_cache": {
                **cache,
                "hits": 0,
                "misses": 6,
                "missed": ["fused_conv2d_add_relu", "fused_dense_add"],
                "misses_tuned_for_other_target": 6,
            },
        },
    )
    doc = diagnose(head, base)
    f6 = finding(doc, 6)
    assert f6["status"] == "cause_found"
    assert "6 of 6 missed workload(s) are in the cache, tuned for another target" in f6["summary"]
    assert "mcpu znver4 -> sapphirerapids" in f6["summary"] and "+amx-tile added" in f6["summary"]
    assert any(
        e["fact"] == "missed key" and e["head"] == "fused_conv2d_add_relu" for e in f6["evidence"]
    )


def test_cache_miss_with_nearest_key_is_step6_keyed_shape(runs: dict[str, dict]) -> None:
    cache = {"path": "/c.json", "sha256": "cd" * 32, "entries": 3}
    base = variant(runs["native"], **{"manifest.tuning_cache": {**cache, "hits": 3, "misses": 0}})
    head = variant(
        runs["slow"],
        **{
            "manifest.tuning_cache": {
                **cache,
                "hits": 1,
                "misses": 2,
                "missed": [
                    {
                        "key": "Conv 1x16x12x12 float32 +sve",
                        "nearest": "Conv 1x16x12x12 float32",
                        "differs": "target differs: +sve added",
                    }
                ],
            }
        },
    )
    f6 = finding(diagnose(head, base), 6)
    assert f6["status"] == "cause_found"
    assert "nearest" in f6["summary"] and "+sve added" in f6["summary"]


def test_cache_without_lookup_counts_is_unknown(runs: dict[str, dict]) -> None:
    head = variant(
        runs["native"],
        **{
            "manifest.tuning_cache": {
                "path": "/db",
                "sha256": "ef" * 32,
                "entries": None,
                "hits": None,
                "misses": None,
            }
        },
    )
    f6 = finding(diagnose(head), 6)
    assert f6["status"] == "unknown"
    assert "head manifest.tuning_cache.hits" in f6["missing"]


def test_target_difference_reads_attributes() -> None:
    assert target_difference(ZEN4, ZEN4) == "same target"
    assert (
        target_difference(
            "llvm -mattr=+neon -mtriple=aarch64-linux-gnu",
            "llvm -mattr=+neon,+sve -mtriple=aarch64-linux-gnu",
        )
        == "mattr +sve added"
    )


# -- arena vs caches (step 8) ---------------------------------------------------------------

CACHES = [
    (1, "Data", "32K", "0"),
    (1, "Instruction", "32K", "0"),
    (2, "Unified", "1024K", "0"),
    (3, "Unified", "32768K", "0-1"),
]


def test_sysfs_caches_are_read_per_level(tmp_path: Path) -> None:
    caches = host_caches(fake_sysfs(tmp_path, CACHES))
    assert [(c.name, c.bytes, c.shared_cpus) for c in caches] == [
        ("L1d", 32768, 1),
        ("L2", 1048576, 1),
        ("L3", 33554432, 2),
    ]
    assert fits_in(900_000, caches) == "L2" and fits_in(40 * 2**20, caches) == "DRAM"
    assert host_caches(tmp_path / "nowhere") == []


def test_arena_grown_past_l2_is_step8(runs: dict[str, dict], tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path / "cache", CACHES)
    base = variant(runs["native"], arena_bytes=800_000, arena_lower_bound_bytes=700_000)
    head = variant(runs["slow"], arena_bytes=3_000_000, arena_lower_bound_bytes=2_900_000)
    doc = diagnose(head, base, sysfs_root=sysfs)
    f8 = finding(doc, 8)
    assert f8["status"] == "cause_found"
    assert "past L2" in f8["summary"] and "1.00 MiB per core" in f8["summary"]
    lvl = next(e for e in f8["evidence"] if e["fact"] == "smallest level holding the arena")
    assert (lvl["base"], lvl["head"]) == ("L2", "L3")
    # Without readable caches the step says so instead of judging.
    f8u = finding(diagnose(head, base, sysfs_root=tmp_path / "none"), 8)
    assert f8u["status"] == "unknown" and "host caches" in f8u["missing"][0]


def test_caches_recorded_with_the_result_win_over_this_host(runs, tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path / "cache", CACHES)
    recorded = [
        {"name": "L1d", "bytes": 48 * 1024, "shared_cpus": 1},
        {"name": "L2", "bytes": 2 * 2**20, "shared_cpus": 1},
        {"name": "L3", "bytes": 105 * 2**20, "shared_cpus": 2},
    ]
    base = variant(runs["native"], arena_bytes=800_000, **{"manifest.host.caches": recorded})
    head = variant(runs["native"], arena_bytes=1_500_000, **{"manifest.host.caches": recorded})
    f8 = finding(diagnose(head, base, sysfs_root=sysfs), 8)
    # With this host's 1 MiB L2 it would cross L2; on the measuring host's 2 MiB it does not.
    assert f8["status"] == "suspect" and "within L2" in f8["summary"]
    assert any("recorded with the result" in e["fact"] for e in f8["evidence"])


# -- kernels (step 10) ----------------------------------------------------------------------


def test_kernels_are_matched_by_the_nodes_they_run(runs: dict[str, dict]) -> None:
    """Generated kernels are numbered per artefact; the nodes they run identify them."""
    base = variant(
        runs["native"],
        kernels=[
            {"kernel": "k0_conv", "op": "FusedConv", "nodes": ["conv0"], "ms": 0.1, "share": 0.5},
            {"kernel": "k1_gemm", "op": "Gemm", "nodes": ["fc"], "ms": 0.1, "share": 0.5},
        ],
    )
    head = variant(
        runs["native"],
        **{"latency_ms.p50": 1.3},  # a slowdown above the noise, for a kernel to explain
        kernels=[
            {
                "kernel": "k0_relayout",
                "op": "Relayout",
                "nodes": ["to_nhwc"],
                "ms": 0.01,
                "share": 0.02,
            },
            {"kernel": "k1_conv", "op": "FusedConv", "nodes": ["conv0"], "ms": 0.4, "share": 0.78},
            {"kernel": "k2_gemm", "op": "Gemm", "nodes": ["fc"], "ms": 0.1, "share": 0.2},
        ],
    )
    f10 = finding(diagnose(head, base), 10)
    assert f10["status"] == "cause_found"
    assert "k1_conv (FusedConv: conv0)" in f10["summary"] and "0.1 -> 0.4" in f10["summary"]


def test_one_kernel_made_slow_is_step10(runs: dict[str, dict]) -> None:
    kernels = [
        {"name": "conv0_fused", "ms": 0.20, "share": 0.40},
        {"name": "conv1_fused", "ms": 0.15, "share": 0.30},
        {"name": "gemm_fc", "ms": 0.05, "share": 0.10},
    ]
    slow = [dict(k) for k in kernels]
    slow[1].update(ms=0.90, share=0.75)
    base = variant(runs["native"], kernels=kernels)
    head = variant(runs["native"], kernels=slow, **{"latency_ms.p50": 1.3})
    doc = diagnose(head, base)
    f10 = finding(doc, 10)
    assert f10["status"] == "cause_found"
    assert "conv1_fused" in f10["summary"] and "0.15 -> 0.9" in f10["summary"]
    moved = next(e for e in f10["evidence"] if e["fact"] == "moved most")
    assert moved["head"].startswith("conv1_fused")
    assert doc["cases"][0]["first_cause"] == 10
    # one run alone: a kernel with 75% of the time is suspect, not a cause
    assert finding(diagnose(head), 10)["status"] == "suspect"


def test_an_onnxruntime_per_node_profile_in_the_artefact_is_read(runs, tmp_path: Path) -> None:
    """A real ORT profile of the artefact's optimised graph, kept beside it, is step 10's
    per-node evidence (guard's artefacts do not keep one: this test puts it there)."""
    import shutil

    import numpy as np
    import onnxruntime as ort

    src = Path(runs["ort"]["results"][0]["artefact"])
    art = tmp_path / "art"
    shutil.copytree(src, art)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(art / "ort_profile")
    sess = ort.InferenceSession(str(art / "model.opt.onnx"), so, providers=["CPUExecutionProvider"])
    x = np.zeros((1, 16, 12, 12), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    sess.end_profiling()
    head = variant(runs["ort"], artefact=str(art), kernels=None)  # the file, not the result
    f10 = finding(diagnose(head), 10)
    assert f10["status"] in ("ok", "suspect")
    assert "onnxruntime profile ort_profile" in str(f10["evidence"])
    assert any(e["fact"].startswith("kernel ") for e in f10["evidence"])


# -- missing facts, bad input, outputs ------------------------------------------------------


def test_an_older_results_file_gives_unknown_naming_the_field(runs: dict[str, dict]) -> None:
    old = variant(runs["native"])
    for r in old["results"]:
        for k in ("partitions", "graph", "arena_bytes", "artefact"):
            r.pop(k, None)
    doc = diagnose(old, runs["native"])
    for step, field in (
        (2, "partitions"),
        (3, "partitions.count"),
        (4, "graph.ops_after"),
        (8, "arena_bytes"),
    ):
        f = finding(doc, step)
        assert f["status"] == "unknown", step
        assert any(field in m for m in f["missing"]), (step, f["missing"])
        assert f["summary"].startswith("unknown: ")


def test_an_error_result_makes_every_step_unknown_with_the_error(runs: dict[str, dict]) -> None:
    broken = variant(runs["native"], verdict="error", error="build failed: no kernel for X")
    for r in broken["results"]:
        for k in ("manifest", "partitions", "graph", "arena_bytes", "latency_ms"):
            r[k] = None
    doc = diagnose(broken, runs["native"])
    fs = doc["cases"][0]["findings"]
    assert [f["status"] for f in fs] == ["unknown"] * 10 + ["not_applicable"]
    assert all("build failed: no kernel for X" in f["summary"] for f in fs[:10])


def test_cli_writes_json_and_markdown_and_exits_1_on_a_cause(runs, tmp_path: Path, capsys) -> None:
    b, h = tmp_path / "base.json", tmp_path / "head.json"
    b.write_text(json.dumps(runs["base"]))
    h.write_text(json.dumps(runs["lrn"]))
    out, md = tmp_path / "doctor.json", tmp_path / "doctor.md"
    rc = main(
        ["doctor", str(b), str(h), "--model", "net", "--json", str(out), "--markdown", str(md)]
    )
    assert rc == 1
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["kind"] == "guard-doctor"
    assert [f["step"] for f in doc["cases"][0]["findings"]] == list(range(1, 12))
    assert "lrn_mid" in capsys.readouterr().out
    text = md.read_text()
    assert "### 3. partitions: ❌ cause found" in text and "lrn_mid" in text
    assert text == to_markdown(doc)
    assert main(["doctor", str(b), "--quiet"]) == 0


def test_cli_refuses_different_suites_in_one_line(runs, tmp_path: Path, capsys) -> None:
    b, h = tmp_path / "base.json", tmp_path / "head.json"
    b.write_text(json.dumps({**runs["base"], "suite": "other"}))
    h.write_text(json.dumps(runs["lrn"]))
    assert main(["doctor", str(b), str(h)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one suite" in err[0]
    assert main(["doctor", str(h), str(h), "--model", "nope"]) == 2
    assert main(["doctor", str(tmp_path / "missing.json")]) == 2


def test_invalid_comparison_is_reported_before_any_kernel(runs: dict[str, dict], capsys) -> None:
    """Issue 28 item 3: the doctor blamed a kernel (step 10, 5.6x) on a run whose rounds
    disagreed by 81%, and put the model-hash change that explained it far down the list.
    Now the facts that make the comparison invalid come first, with the effect size the
    noise hides, and no kernel is a cause while they hold."""
    from guard.doctor.render import render_console

    kernels = [{"name": "conv0", "ms": 0.1, "share": 0.5}, {"name": "fc", "ms": 0.1, "share": 0.5}]
    slow = [{"name": "conv0", "ms": 0.56, "share": 0.85}, {"name": "fc", "ms": 0.1, "share": 0.15}]
    base = variant(runs["native"], kernels=kernels)
    head = variant(runs["native"], kernels=slow, noise_pct=81.0,
                   **{"latency_ms.p50": 1.4, "manifest.model.sha256": "f" * 64})  # fmt: skip
    doc = diagnose(head, base)
    case = doc["cases"][0]
    v = case["validity"]
    assert not v["valid"] and [i["fact"] for i in v["invalid"]] == ["model sha256", "noise_pct"]
    rounds = len(runs["native"]["results"][0]["rounds"])
    assert v["hidden_below_pct"] == pytest.approx(2 * ((2.0**2 + 81.0**2) / rounds) ** 0.5)
    assert v["effect_pct"] == pytest.approx(40.0)
    f1, f10 = finding(doc, 1), finding(doc, 10)
    assert f1["status"] == "suspect" and f1["summary"].startswith("comparison not valid: ")
    assert [e["fact"] for e in f1["evidence"][:2]] == ["model sha256", "noise_pct"]
    assert (
        f10["status"] == "suspect"
        and "not a cause while the comparison is not valid" in (f10["summary"])
    )
    assert case["first_cause"] is None
    render_console(doc)
    out = capsys.readouterr().out
    first_lines = out.splitlines()[:3]
    assert any("comparison not valid: model sha256; noise_pct" in line for line in first_lines)
    assert out.index("comparison not valid") < out.index("kernels")
    md = to_markdown(doc)
    assert md.index("comparison not valid") < md.index("### 1. measurement")
    # The model changed but the noise is small: the kernel is still no cause, the graph
    # steps keep theirs, and the validity line leads.
    quiet = variant(head, noise_pct=2.0)
    q = diagnose(quiet, base)["cases"][0]
    assert [i["fact"] for i in q["validity"]["invalid"]] == ["model sha256"]
    assert q["findings"][9]["status"] == "suspect"
    # A clean comparison says what the noise hides and blames the kernel.
    clean = diagnose(
        variant(
            quiet, **{"manifest.model.sha256": base["results"][0]["manifest"]["model"]["sha256"]}
        ),
        base,
    )
    c = clean["cases"][0]
    assert c["validity"]["valid"] and c["first_cause"] == 10
    assert "noise hides effects below" in to_markdown(clean)


def test_step10_sets_the_counted_cost_beside_the_kernel_times() -> None:
    from guard.doctor.facts import Side
    from guard.doctor.steps_kernels import step10_kernels

    fp = {"engine": "qemu-tcg-plugin", "emulator": "qemu-x86_64 7.2.22", "plugin_sha256": "p",
          "target": "t", "input_sha256": "i"}  # fmt: skip

    def side(label: str, instructions: float) -> Side:
        kernels = [{"kernel": "k0", "op": "Conv", "share": 1.0, "ms": 1.0, "nodes": ["c"]}]
        counted = {"instructions": instructions, "bytes_loaded": 1e5, "bytes_stored": 1e4,
                   "fingerprint": fp}  # fmt: skip
        return Side(label, Result.from_json({"kernels": kernels, "counted": counted}))

    f = step10_kernels(side("base", 1e6), side("head", 1.2e6), None).to_dict()  # type: ignore[arg-type]
    facts = {e["fact"]: e for e in f["evidence"]}
    assert facts["counted instructions / inference"]["head"] == 1.2e6
    assert "instructions +20.000%" in facts["counted verdict"]["head"]


def test_step10_ranks_kernels_by_counted_difference_when_both_sides_counted_them() -> None:
    from guard.doctor.facts import Side
    from guard.doctor.finding import CAUSE
    from guard.doctor.steps_kernels import step10_kernels

    fp = {"engine": "qemu-tcg-plugin", "emulator": "qemu-x86_64 7.2.22", "plugin_sha256": "p",
          "target": "t", "input_sha256": "i"}  # fmt: skip

    def side(label: str, relu: int, symbol: str) -> Side:
        # Times say the conv moved (noise); the counts say the relu got the work.
        times = [{"kernel": "k0", "op": "Conv", "ms": 2.0 if label == "head" else 1.0,
                  "nodes": ["c"]}]  # fmt: skip
        kernels = {"k0_conv": {"instructions": 5000, "op": "Conv", "nodes": ["c"]},
                   symbol: {"instructions": relu, "op": "Relu", "nodes": ["r"]},
                   "guard_main": {"instructions": 40, "op": "entry", "nodes": []}}  # fmt: skip
        counted = {"instructions": 5040.0 + relu, "bytes_loaded": 1e5, "bytes_stored": 1e4,
                   "fingerprint": fp, "kernels": kernels}  # fmt: skip
        return Side(label, Result.from_json({"kernels": times, "counted": counted}))

    # Kernel symbols are per build (k1 in base, k2 in head): the nodes match them.
    f = step10_kernels(side("base", 100, "k1_relu"), side("head", 900, "k2_relu"), None)  # type: ignore[arg-type]
    d = f.to_dict()
    assert d["status"] == CAUSE, d
    assert "k2_relu (Relu: r)" in d["summary"] and "+800" in d["summary"], d["summary"]
    rows = [e for e in d["evidence"] if e["fact"].endswith("counted instructions")]
    assert "Relu" in rows[0]["fact"] and rows[0]["base"] == 100, rows
