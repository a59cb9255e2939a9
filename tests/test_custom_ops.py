"""Custom operators: Python implementations (@graphkit.custom_op) in ONNX Runtime and the reference
backend, custom-op libraries (--custom-ops), and the errors around them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, fixture

import graphkit as gk
from graphkit import _ort
from graphkit.cli import main

OPS = ROOT / "examples" / "python_ops.py"
extensions = pytest.importorskip("onnxruntime_extensions", reason="the custom-ops extra is not installed")


def _my_add_custom() -> gk.Model:
    """The tutorial's model: output = my::my_add(a, b), that is 2·a + b."""
    b = gk.GraphBuilder("my_add_custom")
    a, c = b.input("a", "float32", [1, 3, 10, 10]), b.input("b", "float32", [1, 3, 10, 10])
    b.opset("my", 1)
    b.output(b.node("my_add", [a, c], name="/my_add", outputs=["output"], domain="my"), "float32", [1, 3, 10, 10])
    return b.build()


def test_decorator_keeps_the_function_callable_and_declares_the_op() -> None:
    (my_add,) = [op for op in gk.load_python_ops(OPS) if op.op_type == "my_add"]
    assert isinstance(my_add, gk.CustomOp)
    assert (my_add.domain, my_add.op_type, my_add.outputs) == ("my", "my_add", ("float32",))
    np.testing.assert_array_equal(my_add(np.ones(2, np.float32), np.ones(2, np.float32)), [3.0, 3.0])


def test_my_add_runs_in_onnx_runtime_as_the_plain_model_computes_it() -> None:
    model = _my_add_custom()
    before = model.proto.SerializeToString()
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=4))
    got = gk.run(model, feeds, python_ops=[OPS])["output"]
    want = gk.run(gk.load(fixture("my_add.onnx")), feeds)["output"]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, 2 * feeds["a"] + feeds["b"], rtol=1e-6)
    assert model.proto.SerializeToString() == before  # the domain is handled in an in-memory copy
    both = gk.compare(model, backend="reference", candidate_backend="ort-noopt", python_ops=[OPS],
                      feed_options=gk.FeedOptions(seed=4))
    assert both.passed and both.tensor("output").max_abs == 0.0  # the same function on both backends


def test_dcn_runs_the_same_in_onnx_runtime_and_the_reference_backend() -> None:
    model = gk.load(fixture("dcn.onnx"))
    ops = gk.load_python_ops(OPS)
    result = gk.compare(model, backend="reference", candidate_backend="ort-noopt", python_ops=ops,
                        feed_options=gk.FeedOptions(seed=2))
    assert result.passed
    out = result.tensor("output")
    assert out.op_type == "deform_conv2d" and out.max_abs <= 1e-5
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=2))
    values = gk.run(model, feeds, outputs=["/conv1/Conv_output_0", "output"], python_ops=ops)
    (deform,) = [op for op in ops if op.op_type == "deform_conv2d"]
    weight = gk.tensor_value(model, next(t for t in model.graph.initializer if t.name == "conv2.weight"))
    expected = deform(feeds["input"], weight, values["/conv1/Conv_output_0"], stride=[1, 1], padding=[1, 1],
                      dilation=[1, 1], groups=1, offset_groups=1)
    np.testing.assert_allclose(values["output"], expected, rtol=1e-6, atol=1e-6)


def test_python_ops_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compare", str(fixture("dcn.onnx")), "--backend", "reference", "--python-ops", str(OPS), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["passed"] and {t["name"] for t in data["tensors"]} >= {"output"}
    assert main(["run", str(fixture("dcn.onnx")), "--python-ops", str(OPS)]) == 0
    assert "output  float32  [1, 3, 10, 10]" in capsys.readouterr().out


def test_a_model_with_an_unimplemented_custom_op_names_it_and_both_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(fixture("dcn.onnx"))]) == 2
    err = capsys.readouterr().err
    assert "custom::deform_conv2d" in err and "--custom-ops" in err and "--python-ops" in err


def test_a_failing_python_op_names_the_op_the_node_and_the_error(tmp_path: Path) -> None:
    ops = tmp_path / "bad.py"
    ops.write_text("import graphkit\n\n@graphkit.custom_op('my', 'my_add', outputs=['float32'])\n"
                   "def my_add(a, b):\n    raise ValueError('boom')\n")
    with pytest.raises(gk.RuntimeFailure) as err:
        gk.compare(_my_add_custom(), backend="reference", candidate_backend="ort-noopt", python_ops=[ops])
    assert "my::my_add" in err.value.message and "boom" in err.value.message and "--python-ops" in (err.value.cli_hint or "") and "python_ops=" in (err.value.hint or "")


def test_python_ops_file_errors_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(gk.UsageError, match="no such Python operators file"):
        gk.load_python_ops(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(gk.UsageError) as err:
        gk.load_python_ops(empty)
    assert "declares no custom operator" in err.value.message and "@graphkit.custom_op" in err.value.hint
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('nope')\n")
    with pytest.raises(gk.UsageError, match="nope"):
        gk.load_python_ops(broken)
    with pytest.raises(gk.UsageError, match="numpy dtype"):
        gk.custom_op("my", "op", outputs=["floaty"])


def test_missing_extensions_is_an_error_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_extensions(name: str, *args: object, **kwargs: object) -> object:
        if name == "onnxruntime_extensions":
            raise ImportError("No module named 'onnxruntime_extensions'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_extensions)
    monkeypatch.setattr(_ort, "_registered", {})
    monkeypatch.setattr(_ort, "_python_ops", [])
    monkeypatch.setattr(_ort, "_python_op_index", {})
    with pytest.raises(gk.UsageError) as err:
        gk.run(_my_add_custom(), python_ops=[OPS])
    assert "onnxruntime-extensions" in err.value.message and "graphkit[custom-ops]" in err.value.hint


def _string_upper() -> gk.Model:
    """One ai.onnx.contrib::StringUpper, an operator of onnxruntime-extensions' own library."""
    node = onnx.helper.make_node("StringUpper", ["text"], ["upper"], domain="ai.onnx.contrib", name="/upper")
    graph = onnx.helper.make_graph([node], "strings", [onnx.helper.make_tensor_value_info("text", onnx.TensorProto.STRING, [2])],
                                   [onnx.helper.make_tensor_value_info("upper", onnx.TensorProto.STRING, [2])])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                         onnx.helper.make_opsetid("ai.onnx.contrib", 1)])
    return gk.Model(proto)


def test_an_operator_of_the_extensions_library_runs_with_custom_ops(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    model = _string_upper()
    library = extensions.get_library_path()
    text = np.array(["abc", "Graph"], dtype=object)
    out = gk.run(model, {"text": text}, custom_ops=[library])["upper"]
    assert list(out) == ["ABC", "GRAPH"]
    with pytest.raises(gk.RuntimeFailure) as err:
        gk.run(model, {"text": text})
    assert "ai.onnx.contrib::StringUpper" in err.value.hint
    gk.save(model, tmp_path / "upper.onnx")
    np.save(tmp_path / "text.npy", np.array(["abc", "Graph"]))
    code = main(["run", str(tmp_path / "upper.onnx"), "--custom-ops", library, "--input", f"text={tmp_path / 'text.npy'}"])
    assert code == 0 and "upper" in capsys.readouterr().out


def test_a_missing_or_broken_library_is_named(tmp_path: Path) -> None:
    model = gk.load(fixture("my_add.onnx"))
    with pytest.raises(gk.UsageError, match="no such custom-op library"):
        gk.run(model, custom_ops=[tmp_path / "nope.so"])
    with pytest.raises(gk.UsageError, match="cannot use custom-op library"):  # (found by the fuzz campaign)
        gk.run(model, custom_ops=[tmp_path / ("x" * 300 + ".so")])
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a library")
    with pytest.raises(gk.RuntimeFailure) as err:
        gk.run(model, custom_ops=[broken])
    assert "broken.so" in err.value.message and err.value.hint


def _custom_then_relu() -> gk.Model:
    """t = my::my_add(a, b) (untyped: no value_info, inference cannot tell), y = Relu(t)."""
    b = gk.GraphBuilder("custom_then_relu")
    a, c = b.input("a", "float32", [1, 3]), b.input("b", "float32", [1, 3])
    b.opset("my", 1)
    t = b.node("my_add", [a, c], name="/my_add", outputs=["t"], domain="my")
    b.output(b.node("Relu", [t], name="/relu", outputs=["y"]), "float32", [1, 3])
    return b.build()


def test_extract_and_split_type_a_custom_ops_output_by_running_it_with_python_ops(tmp_path: Path) -> None:
    model = _custom_then_relu()
    with pytest.raises(gk.UsageError) as err:
        gk.extract(model, inputs=["t"], outputs=["y"])
    assert "'t'" in err.value.message
    tail = gk.extract(model, inputs=["t"], outputs=["y"], python_ops=[OPS])
    (t,) = tail.graph.input
    assert t.name == "t" and t.type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    parts = gk.split(model, at=["t"], python_ops=[OPS])
    assert [f.model.graph.output[0].name for f in parts.fragments] == ["t", "y"]
    chain = gk.run_chain(parts, reference=model, python_ops=[OPS])
    assert chain.passed and chain.exact
    gk.save(model, tmp_path / "m.onnx")
    assert main(["extract", str(tmp_path / "m.onnx"), str(tmp_path / "tail.onnx"), "--inputs", "t", "--outputs", "y",
                 "--python-ops", str(OPS)]) == 0
    assert main(["split", str(tmp_path / "m.onnx"), str(tmp_path / "parts"), "--at", "t", "--python-ops", str(OPS)]) == 0
    assert main(["run-chain", str(tmp_path / "parts"), "--python-ops", str(OPS)]) == 0


_SIGNATURES_SCRIPT = """
import gc, sys
import numpy as np
import graphkit as gk
from graphkit import _ort
from graphkit.errors import RuntimeFailure

def model(n):
    b = gk.GraphBuilder(f"sum{n}")
    xs = [b.input(f"x{i}", "float32", [3]) for i in range(n)]
    b.opset("t", 1)
    b.output(b.node(f"sum{n}", xs, outputs=["y"], domain="t"), "float32", [3])
    return b.build()

def op(n):
    return gk.custom_op("t", f"sum{n}", outputs=["float32"])(lambda *xs: np.sum(xs, axis=0) + n)

def run(sess, n):
    feeds = {f"x{i}": np.full(3, i, np.float32) for i in range(n)}
    return _ort.run_session(sess, ["y"], feeds, f"sum{n}")[0]

first = _ort.session(model(1), python_ops=[op(1)])
assert run(first, 1).tolist() == [1.0] * 3
refused, sess = [], None
for n in range(2, 24):  # each a new signature; the previous session stays open while the next is made
    try:
        sess = _ort.session(model(n), python_ops=[op(n)])
    except RuntimeFailure as err:
        refused.append(n)
        assert "separate process" in err.hint, err.hint
        continue
    assert run(sess, n).tolist() == [n * (n - 1) / 2 + n] * 3
assert run(first, 1).tolist() == [1.0] * 3  # the first session still runs, with its own operator
del first, sess
gc.collect()
fresh = _ort.session(model(30), python_ops=[op(30)])  # nothing open any more: a new signature is fine
assert run(fresh, 30).tolist() == [30 * 29 / 2 + 30] * 3
print("refused", refused)
"""


def test_open_sessions_survive_new_python_op_signatures(tmp_path: Path) -> None:
    """onnxruntime-extensions hands ONNX Runtime pointers into a C++ vector of its operators, which a
    registration may grow and move: a session opened before must neither crash nor run freed memory.
    MALLOC_PERTURB_ makes glibc fill freed memory, so a stale pointer crashes at once instead of
    corrupting the heap for the garbage collector to trip on later (the old failure mode)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MALLOC_PERTURB_": "165"}
    done = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _SIGNATURES_SCRIPT], env=env,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    refused = json.loads(done.stdout.split("refused", 1)[1].strip())
    # New signatures register while the table has room (the first one makes room for several); once it
    # would have to grow under the open sessions, every further one is refused, clearly, until they close.
    assert refused == list(range(refused[0], 24)) and refused[0] >= 6, refused
