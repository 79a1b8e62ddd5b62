"""The fuzzing harness: hypothesis mutates valid suites and models; guard must keep its contract.

A case is a suite file and a model file in a directory. ``run_case`` runs ``guard run`` on it
in a forked child of a warm process (imports done once, so a case costs its build, not an
interpreter start) and ``violations`` checks the contract on the outcome:

- the exit code is 0, 1 or 2 (3 is guard's own failure; none of these inputs is guard's);
- no signal killed guard, and it finished within ``CASE_TIMEOUT_S`` (no hang);
- stderr has no traceback and no "internal error", and a 2 comes with a ``guard: error:`` line.

Mutations (``cases()``) start from valid inputs: key-path edits of the suite (a value
replaced by a hostile one, a key removed or added), text-level damage of the YAML (byte
flips, truncation, an alias bomb, deep nesting), and protobuf-level edits of the model (dims,
element types, initializer values such as axes, attributes, op types, opsets, edges, raw
bytes). A case that breaks the contract is written to ``corpus/`` (``save_case``), where it
stays as a regression case replayed by test_fuzz.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import select
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
CASE_TIMEOUT_S = 180.0
FAST_MEASURE = {"warmup_s": 0.0, "min_iters": 3, "min_time_s": 0.001, "max_time_s": 2}

# ---------------------------------------------------------------------------- valid seeds


def convnet() -> onnx.ModelProto:
    """Conv → Relu → GlobalAveragePool → Flatten → Gemm → Softmax (as the spine tests)."""
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
        numpy_helper.from_array((rng.standard_normal((10, 8)) * 0.5).astype(np.float32), "fw"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fb"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["l"], transB=1, name="fc"),
        helper.make_node("Softmax", ["l"], ["y"], axis=1, name="softmax"),
    ]
    g = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        init,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def shapeops() -> onnx.ModelProto:
    """Shape arithmetic with axes initializers: what onnx's data propagation works on."""
    init = [
        numpy_helper.from_array(np.array([0], np.int64), "axes0"),
        numpy_helper.from_array(np.array([1], np.int64), "start"),
        numpy_helper.from_array(np.array([3], np.int64), "end"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array([2], np.int64), "axes2"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "start", "end", "axes0"], ["hw"], name="slice"),
        helper.make_node("ReduceProd", ["hw"], ["n"], keepdims=1, name="prod"),
        helper.make_node("Concat", ["minus1", "n"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["x", "newshape"], ["flat"], name="reshape"),
        helper.make_node("Unsqueeze", ["flat", "axes2"], ["u"], name="unsqueeze"),
        helper.make_node("Squeeze", ["u", "axes2"], ["sq"], name="squeeze"),
        helper.make_node("Relu", ["sq"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "shapeops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 768])],
        init,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def int_inputs() -> onnx.ModelProto:
    """Integer and bool inputs (token ids, a mask): what the suite's dist/value bind."""
    init = [numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "emb")]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0, name="gather"),
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Unsqueeze", ["m", "ax"], ["m2"], name="unsqueeze"),
        helper.make_node("Mul", ["e", "m2"], ["y"], name="mul"),
    ]
    init.append(numpy_helper.from_array(np.array([2], np.int64), "ax"))
    g = helper.make_graph(
        nodes,
        "ints",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3]),
            helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])],
        init,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


SEEDS = {"convnet": convnet, "shapeops": shapeops, "int_inputs": int_inputs}
# The suite's inputs block for each seed (binds shapes, chooses the data).
SEED_INPUTS: dict[str, dict[str, Any]] = {
    "convnet": {"x": {"shape": [1, 3, 16, 16], "dist": "normal", "seed": 0}},
    "shapeops": {"x": {"shape": [1, 3, 16, 16], "dist": "normal", "seed": 0}},
    "int_inputs": {
        "ids": {"shape": [1, 3], "dist": "uniform", "low": 0, "high": 9},
        "mask": {"shape": [1, 3], "dist": "ones"},
    },
}
OPTIONS = {
    "onnxruntime": ["graph_optimization_level", "providers", "tuning_cache"],
    "bundled": ["profile", "pipeline", "tuning_cache"],
    "tvm": ["tuning_cache", "opt_level"],
}


def base_suite(backends: list[str] | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "suite": "fz",
        "defaults": {
            "backends": backends or ["onnxruntime"],
            "threads": 1,
            "measure": dict(FAST_MEASURE),
            "checks": {
                "tolerance": {"rtol": 1e-3, "atol": 1e-4},
                "partitions": {"max": 4},
                "latency": {"p50_ms": 1000},
            },
        },
        "models": [
            {
                "name": "m",
                "source": "model.onnx",
                "inputs": {"x": {"shape": [1, 3, 16, 16], "dist": "normal", "seed": 0}},
            }
        ],
    }


# ---------------------------------------------------------------------------- strategies

SUITE_KEYS = [
    "schema_version",
    "suite",
    "description",
    "defaults",
    "models",
    "backends",
    "target",
    "threads",
    "measure",
    "checks",
    "profile",
    "options",
    "build_timeout_s",
    "name",
    "source",
    "inputs",
    "shape",
    "dist",
    "seed",
    "mean",
    "std",
    "low",
    "high",
    "value",
    "warmup_s",
    "min_iters",
    "min_time_s",
    "max_time_s",
    "max_iters",
    "rounds",
    "latency",
    "tolerance",
    "accuracy",
    "partitions",
    "arena",
    "tuning",
    "p50_ms",
    "p90_ms",
    "regress_pct",
    "rtol",
    "atol",
    "dataset",
    "min_top1",
    "limit",
    "max",
    "max_bytes",
    "min_hit_rate",
    "x86_64",
    "aarch64",
    "onnxruntime",
    "bundled",
    "tvm",
    "tuning_cache",
    "graph_optimization_level",
    "providers",
]
WORDS = [
    "zoo:mlp",
    "zoo:nope",
    "zoo:digits-test",
    "onnxruntime",
    "bundled",
    "host",
    "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
    "llvm -mcpu=nonsense",
    "/dev/zero",
    "/dev/null",
    "model.onnx",
    "../model.onnx",
    "missing.onnx",
    "const",
    "uniform",
    "ones",
    "disabled",
    "all",
    "x",
    "m",
    "",
    " ",
    "\x00",
    "é",
    "a" * 300,
    "1e30",
    ".inf",
    "null",
    "true",
    "[1, 2]",
    "{a: 1}",
    "*ref",
    "&a",
    "!!python/object:os.system",
    "%YAML",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2, 3, 16, 2**31, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(
            st.one_of(st.sampled_from(SUITE_KEYS), st.text(max_size=6), st.integers()),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


@st.composite
def suite_edits(draw: st.DrawFn, suite: dict[str, Any]) -> dict[str, Any]:
    """Key-path edits: replace a value, remove a key, add a key (known or not)."""
    doc = copy.deepcopy(suite)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["set", "set", "delete", "add", "option"]))
        if action == "option" and isinstance(doc, dict):
            backend = draw(st.sampled_from(sorted(OPTIONS)))
            key = draw(st.sampled_from([*OPTIONS[backend], "nosuch"]))
            where = draw(st.sampled_from(["defaults", "model"]))
            block = (
                doc.get("defaults")
                if where == "defaults"
                else next(iter(doc.get("models") or []), None)
            )
            if isinstance(block, dict):
                opts = block.setdefault("options", {})
                if isinstance(opts, dict):
                    sub = opts.setdefault(backend, {})
                    if isinstance(sub, dict):
                        sub[key] = draw(values)
            continue
        if not path:
            if action == "set":
                doc = draw(values)
            continue
        parent = _get(doc, path[:-1])
        if not isinstance(parent, dict | list):
            continue
        if action == "set":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        else:
            target = _get(doc, path)
            if isinstance(target, dict):
                target[draw(st.sampled_from(SUITE_KEYS))] = draw(values)
            elif isinstance(target, list):
                target.append(draw(values))
        if not isinstance(doc, dict | list):
            break
    return doc


def _dump(doc: Any) -> str:
    try:
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return yaml.safe_dump(json.loads(json.dumps(doc, default=str)), sort_keys=False)


def _bomb(levels: int) -> str:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines)


@st.composite
def text_damage(draw: st.DrawFn, text: str) -> bytes:
    """Byte-level damage of a suite file, or a hostile construct spliced in."""
    data = bytearray(text.encode("utf-8"))
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "bomb", "nest", "anchor"]))
    if kind == "flip" and data:
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
    elif kind == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "insert":
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(
            st.sampled_from(
                [
                    b"&a ",
                    b"*a",
                    b": :",
                    b"\t",
                    b"\xff\xfe",
                    b"{",
                    b"- ",
                    b"!!binary ",
                    b"---\n",
                    b"? ",
                ]
            )
        )
    elif kind == "bomb":
        levels = draw(st.integers(2, 9))
        data = (
            bytearray(f"{_bomb(levels)}\n".encode())
            + data.replace(b"models:", f"models: *l{levels}\nxmodels:".encode(), 1)
            if draw(st.booleans())
            else bytearray(f"{_bomb(levels)}\n".encode()) + data
        )
    elif kind == "nest":
        depth = draw(st.sampled_from([10, 1000, 50_000]))
        data += b"\ndeep: " + b"[" * depth + b"]" * draw(st.sampled_from([0, depth]))
    else:
        data = data.replace(b"threads: 1", b"threads: &t 1", 1).replace(
            b"min_iters: 3", b"min_iters: *t", 1
        )
    return bytes(data)


ELEM_TYPES = list(range(0, 27))
DIMS = [-5, -1, 0, 1, 2, 3, 7, 16, 2**31, 2**40]
OPS = [
    "Relu",
    "Conv",
    "Gemm",
    "Reshape",
    "Unsqueeze",
    "Squeeze",
    "Concat",
    "Slice",
    "Gather",
    "Softmax",
    "Identity",
    "Add",
    "MatMul",
    "Transpose",
    "NoSuchOp",
    "Loop",
    "If",
    "Cast",
    "Expand",
    "Tile",
    "ConstantOfShape",
    "TopK",
    "Resize",
]


@st.composite
def model_edits(draw: st.DrawFn, model: onnx.ModelProto) -> bytes:
    """Protobuf-level edits of a valid model (and, sometimes, damage to its bytes)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(
            st.sampled_from(
                ["dim", "elem", "init", "attr", "op", "edge", "opset", "ir", "drop", "dup"]
            )
        )
        if kind == "dim":
            vis = list(g.input) + list(g.output)
            vi = draw(st.sampled_from(vis))
            dims = vi.type.tensor_type.shape.dim
            if len(dims):
                d = dims[draw(st.integers(0, len(dims) - 1))]
                choice = draw(st.sampled_from(["value", "param", "clear"]))
                if choice == "value":
                    d.dim_value = draw(st.sampled_from(DIMS))
                elif choice == "param":
                    d.dim_param = draw(st.sampled_from(["N", "", "batch size", "x"]))
                else:
                    d.Clear()
        elif kind == "elem":
            target = draw(st.sampled_from(["input", "output", "init"]))
            t = draw(st.sampled_from(ELEM_TYPES))
            if target == "input":
                g.input[0].type.tensor_type.elem_type = t
            elif target == "output":
                g.output[0].type.tensor_type.elem_type = t
            elif len(g.initializer):
                g.initializer[draw(st.integers(0, len(g.initializer) - 1))].data_type = t
        elif kind == "init" and len(g.initializer):
            i = draw(st.integers(0, len(g.initializer) - 1))
            t = g.initializer[i]
            try:
                arr = numpy_helper.to_array(t).copy()
            except Exception:  # noqa: BLE001 - an earlier edit broke it already
                continue
            how = draw(st.sampled_from(["value", "shape", "truncate"]))
            if how == "value" and arr.size:
                flat = arr.reshape(-1)
                j = draw(st.integers(0, flat.size - 1))
                v = draw(st.sampled_from([-100, -5, -2, -1, 0, 1, 2, 3, 5, 100, 2**40]))
                flat[j] = (
                    v
                    if arr.dtype.kind in "iu"
                    else draw(st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1e38, float(v)]))
                )
                t.CopyFrom(numpy_helper.from_array(arr, t.name))
            elif how == "shape":
                del t.dims[:]
                t.dims.extend(draw(st.lists(st.sampled_from([0, 1, 2, 3, 8, 100]), max_size=4)))
            elif t.raw_data:
                t.raw_data = t.raw_data[: draw(st.integers(0, len(t.raw_data)))]
        elif kind == "attr":
            nodes = [n for n in g.node if len(n.attribute)]
            if nodes:
                n = draw(st.sampled_from(nodes))
                a = n.attribute[draw(st.integers(0, len(n.attribute) - 1))]
                if a.type == onnx.AttributeProto.INT:
                    a.i = draw(st.sampled_from([-100, -2, -1, 0, 1, 2, 5, 2**40]))
                elif a.type == onnx.AttributeProto.INTS:
                    del a.ints[:]
                    a.ints.extend(draw(st.lists(st.sampled_from([-3, -1, 0, 1, 2, 7]), max_size=6)))
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = draw(st.floats(allow_nan=True, allow_infinity=True, width=32))
        elif kind == "op" and len(g.node):
            g.node[draw(st.integers(0, len(g.node) - 1))].op_type = draw(st.sampled_from(OPS))
        elif kind == "edge" and len(g.node):
            n = g.node[draw(st.integers(0, len(g.node) - 1))]
            names = [x for nn in g.node for x in nn.output] + ["x", "", "nowhere"]
            if len(n.input) and draw(st.booleans()):
                n.input[draw(st.integers(0, len(n.input) - 1))] = draw(st.sampled_from(names))
            elif len(n.output):
                n.output[0] = draw(st.sampled_from(names))
        elif kind == "opset":
            m.opset_import[0].version = draw(st.sampled_from([1, 6, 9, 11, 13, 18, 21, 99]))
        elif kind == "ir":
            m.ir_version = draw(st.sampled_from([0, 1, 3, 7, 9, 10, 99]))
        elif kind == "drop" and len(g.node) > 1:
            del g.node[draw(st.integers(0, len(g.node) - 1))]
        elif kind == "dup" and len(g.node):
            g.node.append(copy.deepcopy(g.node[draw(st.integers(0, len(g.node) - 1))]))
    data = bytearray(m.SerializeToString())
    if draw(st.integers(0, 9)) == 0 and data:
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


@dataclass
class Case:
    suite: bytes
    model: bytes
    label: str = ""

    def digest(self) -> str:
        return hashlib.sha256(self.suite + b"\0" + self.model).hexdigest()[:16]


@st.composite
def cases(draw: st.DrawFn, backends: tuple[str, ...] = ("onnxruntime",)) -> Case:
    """One mutated (suite, model): suite edits, suite text damage, or model edits."""
    seed = draw(st.sampled_from(sorted(SEEDS)))
    model = SEEDS[seed]()
    suite = base_suite([draw(st.sampled_from(list(backends)))])
    suite["models"][0]["inputs"] = copy.deepcopy(SEED_INPUTS[seed])
    kind = draw(st.sampled_from(["suite", "suite", "text", "model", "model", "model", "both"]))
    model_bytes = model.SerializeToString()
    if seed == "shapeops":
        suite["defaults"]["checks"].pop("partitions")
    if kind in ("suite", "both"):
        edited = draw(suite_edits(suite))
        text = _dump(edited).encode()
    else:
        text = _dump(suite).encode()
    if kind == "text":
        text = draw(text_damage(text.decode()))
    if kind in ("model", "both"):
        model_bytes = draw(model_edits(model))
    return Case(text, model_bytes, f"{seed}/{kind}")


# ---------------------------------------------------------------------------- running


@dataclass
class Outcome:
    rc: int | None  # exit code, None when killed or timed out
    signal: str | None
    timed_out: bool
    stderr: str
    seconds: float


def _child(case_dir: Path, argv: list[str]) -> None:  # pragma: no cover - forked child
    code = 70
    try:
        os.setpgid(0, 0)
        os.chdir(case_dir)
        fd = os.open(case_dir / "stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        out = os.open(os.devnull, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        for var in ("MLFLOW_TRACKING_URI", "GUARD_DEBUG", "GUARD_NO_ISOLATE"):
            os.environ.pop(var, None)
        os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
        from guard.cli.main import main

        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:  # noqa: BLE001 - an escape past main() is a contract breach
        import traceback

        traceback.print_exc()
        code = 99
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def run_case(case: Case, root: Path, timeout_s: float = CASE_TIMEOUT_S) -> Outcome:
    """Run ``guard run suite.yaml --no-track --json r.json`` on a case in a forked child."""
    d = Path(tempfile.mkdtemp(prefix="case-", dir=root))
    (d / "suite.yaml").write_bytes(case.suite)
    (d / "model.onnx").write_bytes(case.model)
    argv = ["run", str(d / "suite.yaml"), "--no-track", "--json", str(d / "r.json")]
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        _child(d, argv)
    timed_out = False
    status = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - t0 > timeout_s:
            timed_out = True
            for kill in (
                lambda: os.killpg(pid, signal.SIGKILL),
                lambda: os.kill(pid, signal.SIGKILL),
            ):
                try:
                    kill()
                    break
                except ProcessLookupError:
                    continue
            _, status = os.waitpid(pid, 0)
            break
        select.select([], [], [], 0.02)
    seconds = time.monotonic() - t0
    try:  # whatever the child started and left behind (its group)
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    err = (d / "stderr.txt").read_text(errors="replace") if (d / "stderr.txt").exists() else ""
    sig = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else None
    rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) and not timed_out else None
    return Outcome(rc, sig, timed_out, err, seconds)


def violations(out: Outcome) -> list[str]:
    """How an outcome breaks guard's contract (empty when it keeps it)."""
    bad = []
    if out.timed_out:
        bad.append(f"hang: no result after {out.seconds:.0f} s")
    if out.signal:
        bad.append(f"killed by {out.signal}")
    if out.rc is not None and out.rc not in (0, 1, 2):
        bad.append(f"exit {out.rc}")
    if "Traceback" in out.stderr:
        bad.append("traceback on stderr")
    if "internal error" in out.stderr:
        bad.append(
            "internal error: "
            + next((line for line in out.stderr.splitlines() if "internal error" in line), "")[:300]
        )
    if out.rc == 2 and "guard: error:" not in out.stderr:
        bad.append("exit 2 without a 'guard: error:' line")
    return bad


def save_case(case: Case, why: list[str], corpus: Path = CORPUS) -> Path:
    """Keep a contract breach as a regression case: corpus/<digest>/{suite.yaml,model.onnx}."""
    d = corpus / case.digest()
    d.mkdir(parents=True, exist_ok=True)
    (d / "suite.yaml").write_bytes(case.suite)
    (d / "model.onnx").write_bytes(case.model)
    (d / "why.txt").write_text("\n".join([case.label, *why]) + "\n")
    return d


def load_corpus(corpus: Path = CORPUS) -> list[tuple[str, Case]]:
    out = []
    for d in sorted(p for p in corpus.iterdir() if p.is_dir()) if corpus.is_dir() else []:
        model = d / "model.onnx"
        out.append(
            (
                d.name,
                Case(
                    (d / "suite.yaml").read_bytes(),
                    model.read_bytes() if model.exists() else b"",
                    d.name,
                ),
            )
        )
    return out


# ---------------------------------------------------------------------------- the driver


@dataclass
class FuzzReport:
    seconds: float
    cases: int
    exit_codes: dict[str, int]
    kinds: dict[str, int]
    breaches: list[tuple[str, list[str]]]  # (saved case dir, why)

    def summary(self) -> str:
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.exit_codes.items()))
        return (
            f"{self.cases} cases in {self.seconds:.0f} s ({codes}); "
            f"{len(self.breaches)} contract breach(es)"
        )


def fuzz(
    seconds: float,
    root: Path,
    *,
    backends: tuple[str, ...] = ("onnxruntime",),
    corpus: Path = CORPUS,
    batch: int = 20,
    log: Any = None,
) -> FuzzReport:
    """Generate and run cases with hypothesis until ``seconds`` have passed.

    hypothesis draws the cases (batches of ``batch`` examples, fresh randomness each);
    every breach is saved to ``corpus`` at once, so a long run interrupted keeps what it
    found. Shrinking is off: a case costs a build, and the raw case is the regression case.
    """
    import shutil
    from collections import Counter

    from hypothesis import HealthCheck, Phase, given, settings

    t0 = time.monotonic()
    end = t0 + seconds
    codes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    breaches: list[tuple[str, list[str]]] = []
    count = 0

    @settings(
        max_examples=batch,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(cases(backends))
    def one(case: Case) -> None:
        nonlocal count
        if time.monotonic() > end:
            return
        out = run_case(case, root)
        count += 1
        kinds[case.label] += 1
        codes[str(out.rc) if out.rc is not None else (out.signal or "timeout")] += 1
        bad = violations(out)
        if bad:
            saved = save_case(case, [*bad, out.stderr[-2000:]], corpus)
            breaches.append((str(saved), bad))
            if log:
                log(f"BREACH {saved.name}: {'; '.join(bad)}")
        for d in root.glob("case-*"):
            shutil.rmtree(d, ignore_errors=True)

    while time.monotonic() < end:
        one()
        if log:
            log(
                f"{count} cases, {time.monotonic() - t0:.0f} s, codes {dict(codes)}, "
                f"{len(breaches)} breach(es)"
            )
    return FuzzReport(time.monotonic() - t0, count, dict(codes), dict(kinds), breaches)
