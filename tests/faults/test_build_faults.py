"""Builds under faults: native crashes, runaway builds, tampering, kills, races, full disks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from faults_helpers import guard_subprocess, kill_when, results, small_convnet, suite_of

from guard.backends.onnxruntime import OnnxRuntimeBackend
from guard.cli.main import main
from guard.run.build import _install, _reuse, clean_stale


def _dotdirs(workdir: Path) -> list[Path]:
    arts = workdir / ".guard" / "artefacts"
    return [p for p in arts.rglob(".*")] if arts.exists() else []


def _two_models(tmp_path: Path) -> dict[str, Path]:
    return {
        "good": small_convnet(tmp_path / "good.onnx"),
        "bad": small_convnet(tmp_path / "bad.onnx"),
    }


def _run(suite: Path, out: Path, *extra: str) -> tuple[int, list[dict]]:
    code = main(["run", str(suite), "--no-track", "--json", str(out), *extra])
    return code, json.loads(out.read_text())["results"]


@pytest.mark.slow
def test_native_crash_in_one_build_is_that_models_error(tmp_path, workdir, monkeypatch, capsys):
    real = OnnxRuntimeBackend.build

    def build(self, req):
        if "bad" in str(req.model_path):
            os.abort()  # what onnx's C++ shape inference does on some malformed models
        return real(self, req)

    monkeypatch.setattr(OnnxRuntimeBackend, "build", build)
    code, res = _run(suite_of(tmp_path, _two_models(tmp_path)), tmp_path / "r.json")
    assert code == 2
    by = {r["model"]: r for r in res}
    assert by["good"]["verdict"] == "pass"
    assert by["bad"]["verdict"] == "error" and by["bad"]["error_kind"] == "usage"
    assert "SIGABRT" in by["bad"]["error"] and "onnxruntime build of bad" in by["bad"]["error"]
    assert "models[1] (bad)" in by["bad"]["error"]
    assert _dotdirs(workdir) == []
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_native_crash_in_the_golden_reference_is_that_models_error(tmp_path, workdir, monkeypatch):
    import guard.backends.onnxruntime as ortb

    real = ortb.reference_session

    def reference_session(path, threads=1):
        if "bad" in str(path):
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(path, threads)

    monkeypatch.setattr(ortb, "reference_session", reference_session)
    code, res = _run(suite_of(tmp_path, _two_models(tmp_path)), tmp_path / "r.json")
    by = {r["model"]: r for r in res}
    assert code == 2 and by["good"]["verdict"] == "pass"
    assert "SIGSEGV" in by["bad"]["error"] and "golden reference" in by["bad"]["error"]
    assert not (tmp_path / "goldens" / "faults" / "bad").exists()


def test_build_time_limit_stops_a_runaway_build(tmp_path, workdir, monkeypatch):
    real = OnnxRuntimeBackend.build

    def build(self, req):
        if "bad" in str(req.model_path):
            time.sleep(300)
        return real(self, req)

    monkeypatch.setattr(OnnxRuntimeBackend, "build", build)
    suite = suite_of(tmp_path, _two_models(tmp_path), extra="build_timeout_s: 3")
    t0 = time.monotonic()
    code, res = _run(suite, tmp_path / "r.json")
    assert time.monotonic() - t0 < 120
    by = {r["model"]: r for r in res}
    assert code == 2 and by["good"]["verdict"] == "pass"
    assert "time limit of 3 s" in by["bad"]["error"] and "build_timeout_s" in by["bad"]["error"]
    assert _dotdirs(workdir) == []


def _artefact(res: dict) -> Path:
    return Path(res["artefact"])


@pytest.mark.slow
def test_edited_ort_meta_is_rebuilt_not_trusted(tmp_path, workdir):
    suite = suite_of(
        tmp_path,
        {"m": small_convnet(tmp_path / "m.onnx")},
        extra="checks: {arena: {max_bytes: 100000000}}",
    )
    code, (first,) = _run(suite, tmp_path / "a.json")
    assert code == 0
    meta = _artefact(first) / "ort.json"
    doc = json.loads(meta.read_text())
    doc["memory"]["arena_bytes"] = 1
    meta.write_text(json.dumps(doc))
    code, (second,) = _run(suite, tmp_path / "b.json")
    assert code == 0 and second["artefact_reused"] is False
    assert second["arena_bytes"] == first["arena_bytes"] != 1


@pytest.mark.slow
def test_corrupted_ort_payload_is_rebuilt(tmp_path, workdir):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    code, (first,) = _run(suite, tmp_path / "a.json")
    payload = _artefact(first) / "model.opt.onnx"
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    code, (second,) = _run(suite, tmp_path / "b.json")
    assert code == 0 and second["artefact_reused"] is False and second["verdict"] == "pass"


@pytest.mark.slow
def test_tampered_bundled_artefact_is_rebuilt(tmp_path, workdir):
    # It used to say "guard run rebuilds it" and then refuse on every run.
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")}, backends="[bundled]")
    code, (first,) = _run(suite, tmp_path / "a.json")
    assert code == 0
    art = _artefact(first)
    victim = max(
        (p for p in art.rglob("*") if p.is_file() and p.name != "hashes.json"),
        key=lambda p: p.stat().st_size,
    )
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    code, (second,) = _run(suite, tmp_path / "b.json")
    assert code == 0 and second["artefact_reused"] is False and second["verdict"] == "pass"
    code, (third,) = _run(suite, tmp_path / "c.json")
    assert code == 0 and third["artefact_reused"] is True


@pytest.mark.slow
def test_tampered_tvm_artefact_is_rebuilt(tmp_path, workdir):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")}, backends="[tvm]")
    code, (first,) = _run(suite, tmp_path / "a.json")
    assert code == 0, first
    art = _artefact(first)
    victim = next(
        p
        for p in art.iterdir()
        if p.suffix == ".json" and p.name not in ("hashes.json", "manifest.json", "build.json")
    )
    victim.write_text(victim.read_text().replace("1", "2", 1))
    code, (second,) = _run(suite, tmp_path / "b.json")
    assert code == 0 and second["artefact_reused"] is False


@pytest.mark.slow
def test_install_keeps_a_whole_artefact_and_replaces_a_damaged_one(tmp_path, workdir):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    code, (first,) = _run(suite, tmp_path / "a.json")
    final = _artefact(first)
    # A second installer arriving with its own complete copy keeps the first one.
    other = final.parent / f".{final.name}.{os.getpid()}.x"
    subprocess.run(["cp", "-a", str(final), str(other)], check=True)
    theirs = _install(other, final)
    assert theirs is not None and not other.exists() and _reuse(final) is not None
    # A damaged artefact is moved aside and replaced in one step each.
    subprocess.run(["cp", "-a", str(final), str(other)], check=True)
    (final / "ort.json").write_text("{}")
    assert _reuse(final) is None
    assert _install(other, final) is None
    assert _reuse(final) is not None and _dotdirs(workdir) == []


def test_stale_temporary_dirs_of_dead_guards_are_removed(tmp_path):
    parent = tmp_path / "arts"
    parent.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [parent / f".abc-123.{dead.pid}.q1w2", parent / f".abc-123.trash.{dead.pid}.z9"]
    live = parent / f".abc-123.{os.getpid()}.e3r4"
    old_unnamed = parent / ".abc-123.k8j7h6g5"
    new_unnamed = parent / ".abc-124.k8j7h6g5"
    for p in (*stale, live, old_unnamed, new_unnamed):
        (p / "sub").mkdir(parents=True)
    os.utime(old_unnamed, (time.time() - 7 * 3600,) * 2)
    removed = clean_stale(parent)
    assert sorted(removed) == sorted([*stale, old_unnamed])
    assert live.exists() and new_unnamed.exists()


@pytest.mark.slow
def test_kill_mid_build_leaves_nothing_the_next_run_trips_on(tmp_path, workdir):
    """SIGKILL while onnxruntime's memory probe runs: debris only inside .guard, cleaned."""
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    marker = tmp_path / "reached"
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    patch = f"""
    import subprocess, pathlib
    _run = subprocess.run
    def run(cmd, *a, **k):
        if "guard.backends.ort_probe" in cmd:
            pathlib.Path({str(marker)!r}).touch()
            time.sleep(600)
        return _run(cmd, *a, **k)
    subprocess.run = run
    """
    proc = guard_subprocess(
        ["run", str(suite), "--no-track"], workdir, patch, env={"TMPDIR": str(systmp)}
    )
    kill_when(proc, marker)
    proc.wait(timeout=60)
    assert [p for p in systmp.iterdir() if p.name.startswith("guard-")] == []  # no probe dirs
    assert _dotdirs(workdir) != []  # the killed build's directory, inside .guard
    code, (res,) = _run(suite, tmp_path / "r.json")
    assert code == 0 and res["verdict"] == "pass"
    assert [p for p in _dotdirs(workdir) if p.parent.name != "goldens"] == []


@pytest.mark.slow
def test_concurrent_runs_on_one_workdir_share_one_artefact(tmp_path, workdir):
    suite = suite_of(
        tmp_path, {"m": small_convnet(tmp_path / "m.onnx")}, backends="[onnxruntime, bundled]"
    )
    # The golden first, so the racers only race on artefacts.
    assert main(["run", str(suite), "--no-track", "--backend", "onnxruntime"]) == 0
    import shutil

    shutil.rmtree(workdir / ".guard" / "artefacts")
    procs = [
        guard_subprocess(
            ["run", str(suite), "--no-track", "--json", str(tmp_path / f"r{i}.json")], workdir
        )
        for i in range(3)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    for i in range(3):
        assert all(r["verdict"] == "pass" for r in results(tmp_path / f"r{i}.json"))
    for backend in ("onnxruntime", "bundled"):
        dirs = list((workdir / ".guard" / "artefacts" / "m" / backend).iterdir())
        assert len(dirs) == 1 and _reuse(dirs[0]) is not None
    assert _dotdirs(workdir) == []


def _mount(target: Path, opts: str) -> bool:
    if os.geteuid() != 0:
        return False
    target.mkdir(exist_ok=True)
    return (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(target)], capture_output=True
        ).returncode
        == 0
    )


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    if not _mount(mnt, "size=2m"):
        pytest.skip("needs root to mount a size-limited tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_during_the_build_names_the_disk_not_the_model(
    tmp_path, small_disk, capsys, monkeypatch
):
    monkeypatch.chdir(small_disk)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    # Goldens live beside the suite (outside the small disk); fill the disk, then build.
    with open(small_disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    (res,) = results(tmp_path / "r.json")
    assert code == 2 and res["verdict"] == "error", err
    assert "space" in res["error"] and "INVALID_PROTOBUF" not in res["error"]
    assert "Traceback" not in err and "internal error" not in err


def test_read_only_artefact_dir_is_exit_2_naming_it(tmp_path, workdir, capsys):
    arts = workdir / ".guard" / "artefacts"
    arts.mkdir(parents=True)
    if os.geteuid() == 0:
        if not _mount(arts, "ro,size=1m"):
            pytest.skip("cannot mount a read-only tmpfs")
    else:
        arts.chmod(0o555)
    try:
        suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
        code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
        err = capsys.readouterr().err
        (res,) = results(tmp_path / "r.json")
        assert code == 2 and "internal error" not in err and "Traceback" not in err
        assert "artefact" in res["error"] and (
            "read-only" in res["error"] or "permission" in res["error"]
        )
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(arts)], check=False)
        else:
            arts.chmod(0o755)
