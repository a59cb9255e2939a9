"""Every public function checks its arguments: wrong types and values raise graphkit errors only.

A table gives each exported callable a valid call; the sweep replaces one argument at a time by a
hostile value (None, floats for ints, ints for names, NaN, bad mappings, NUL in paths, ...). Whatever
happens, nothing but a GraphkitError may come out (a call may also succeed).
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture

import graphkit as gk
from graphkit import _check_args as argcheck

HOSTILE: list[Any] = [
    None, 2.5, math.nan, math.inf, -1, 0, 10**30, True, "", "\0", "no_such_name", b"bytes", 3 + 0j,
    [None], [1], [""], ["no_such_name"], [[1]], {"a": 5}, {1: 2}, {"x": None}, {"x": math.nan}, (), {},
    object(), np.float32(1.5), np.array([1.0, 2.0]), ("a", "b", "c"), {"x": (math.nan, 1.0)},
]


def _tiny() -> gk.Model:
    """x[batch,4] * w -> Softmax(axis=1) -> + Constant c -> y, and a dead Abs."""
    b = gk.GraphBuilder("tiny")
    x = b.input("x", "float32", ["batch", 4])
    w = b.initializer(np.ones(4, np.float32), "w")
    c = b.constant(np.array([2.0], np.float32), "c")
    m = b.node("Mul", [x, w], name="mul", outputs=["m"])
    s = b.node("Softmax", [m], name="sm", outputs=["s"], axis=1)
    b.node("Abs", [m], name="dead", outputs=["unused"])
    b.output(b.node("Add", [s, c], name="add", outputs=["y"]), "float32", ["batch", 4])
    return b.build()


def _fails_to_run() -> gk.Model:
    """x[n] -> Abs -> Reshape to [3, 7]: ONNX Runtime fails running the Reshape when n is not 21."""
    b = gk.GraphBuilder("broken")
    x = b.input("x", "float32", ["n"])
    shape = b.initializer(np.array([3, 7], np.int64), "shape")
    y = b.node("Reshape", [b.node("Abs", [x], name="abs", outputs=["a"]), shape], name="reshape", outputs=["y"])
    b.output(y, "float32", [3, 7])
    return b.build()


def _table(tmp: Path) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    """Exported callable name → (callable, a valid call's arguments by keyword or position name)."""
    model = _tiny()
    other = gk.load(fixture("linear_func.onnx"))
    parts = gk.split(model, parts=2)
    folder = gk.write_split(parts, tmp / "written").folder
    recipe = tmp / "r.json"
    recipe.write_text('[{"op": "cleanup"}]')
    markers = gk.load(fixture("debug_markers.onnx"))
    path = fixture("linear_func.onnx")
    ops_file = tmp / "ops.py"
    ops_file.write_text("import graphkit\n\n@graphkit.custom_op('my', 'Twice', outputs=['float32'])\n"
                        "def twice(x):\n    return 2 * x\n")
    python_op = gk.custom_op("my", "Twice", outputs=["float32"])(lambda x: 2 * x)
    builder = gk.GraphBuilder("b")
    builder.input("x", "float32", [2])
    broken = _fails_to_run()
    relu = gk.GraphBuilder("relu")
    relu.output(relu.node("Relu", [relu.input("v", "float32", ["batch", 4])], outputs=["r"]), "float32", ["batch", 4])
    return {
        "load": (gk.load, {"path": path, "lazy": None}),
        "save": (gk.save, {"model": model, "path": tmp / "o.onnx", "external": None, "location": None,
                           "size_threshold": 1024}),
        "tensor_value": (gk.tensor_value, {"model": model, "tensor": model.graph.initializer[0]}),
        "parse_model": (gk.parse_model, {"text": '<ir_version: 8, opset_import: ["" : 17]> g (float[2] x) => '
                                                 "(float[2] y) { y = Neg(x) }"}),
        "GraphBuilder": (gk.GraphBuilder, {"name": "g", "opset": 17, "ir_version": 8, "producer_name": "p",
                                           "doc_string": ""}),
        "GraphBuilder.input": (builder.input, {"name": "in2", "dtype": "float32", "shape": ["n", 2]}),
        "GraphBuilder.output": (builder.output, {"name": "y", "dtype": "float32", "shape": [2]}),
        "GraphBuilder.initializer": (builder.initializer, {"value": [1.0, 2.0], "name": None, "dtype": "float32"}),
        "GraphBuilder.constant": (builder.constant, {"value": [1.0], "name": None, "dtype": None}),
        "GraphBuilder.node": (builder.node, {"op_type": "Neg", "inputs": ["x"], "outputs": None, "name": None,
                                             "domain": "", "domain_version": 1, "doc_string": None, "attrs": None}),
        "GraphBuilder.opset": (builder.opset, {"domain": "", "version": 17}),
        "summarize": (gk.summarize, {"model": model}),
        "auto_mixed_precision": (gk.auto_mixed_precision, {"model": model, "tolerance": gk.Tolerance(1e-2, 1e-2),
                                                           "feeds": None, "feed_options": gk.FeedOptions(),
                                                           "keep_io_types": True, "keep_op": (), "keep_node": (),
                                                           "progress": None, "fragment_bytes": 2**20}),
        "convert_opset": (gk.convert_opset, {"model": model, "version": 13}),
        "convert_opset_with_report": (gk.convert_opset_with_report, {"model": model, "version": 16}),
        "set_dtype": (gk.set_dtype, {"model": model, "tensor": "x", "dtype": "float16"}),
        "to_float16": (gk.to_float16, {"model": model, "keep_io_types": False, "keep_op": ["Abs"],
                                       "keep_node": ["mul"], "progress": None}),
        "to_float16_with_report": (gk.to_float16_with_report, {"model": model, "keep_io_types": True,
                                                               "keep_op": (), "keep_node": (), "progress": None}),
        "list_nodes": (gk.list_nodes, {"model": model, "op": ["Mul"], "name": ["*"], "shapes": {"x": [2, 4]},
                                       "dims": {"batch": 2}}),
        "toposort": (gk.toposort, {"model": model}),
        "infer_shapes": (gk.infer_shapes, {"model": model, "observe": True, "check": True}),
        "infer_shapes_with_report": (gk.infer_shapes_with_report, {"model": model, "observe": False, "check": False}),
        "validate": (gk.validate, {"model": model, "checker": True, "full_check": True}),
        "diff": (gk.diff, {"a": model, "b": other, "tolerance": gk.Tolerance()}),
        "extract": (gk.extract, {"model": model, "inputs": ["m"], "outputs": ["y"], "check": True, "types": None,
                                 "observe": True}),
        "extract_with_report": (gk.extract_with_report, {"model": model, "inputs": ["m"], "outputs": ["y"],
                                                         "types": {"m": ("float32", ["batch", 4])}}),
        "expose": (gk.expose, {"model": model, "tensors": ["m"], "op_types": (), "all_tensors": False}),
        "expose_with_report": (gk.expose_with_report, {"model": model, "tensors": ["s"], "types": {"s": "float32"}}),
        "split": (gk.split, {"model": model, "at": None, "parts": 2, "balance": "nodes", "check": True,
                             "custom_ops": (), "python_ops": (), "progress": None}),
        "write_split": (gk.write_split, {"result": parts, "outdir": tmp / "parts", "overwrite": True,
                                         "external": None, "progress": None}),
        "load_split": (gk.load_split, {"path": folder}),
        "set_attribute": (gk.set_attribute, {"model": model, "node": "sm", "attribute": "axis", "value": 0}),
        "remove_attribute": (gk.remove_attribute, {"model": model, "node": "sm", "attribute": "axis"}),
        "set_op_type": (gk.set_op_type, {"model": model, "node": "add", "op_type": "Sub", "domain": None}),
        "rename_tensor": (gk.rename_tensor, {"model": model, "old": "m", "new": "m2"}),
        "rename_node": (gk.rename_node, {"model": model, "old": "mul", "new": "mul2"}),
        "bypass_node": (gk.bypass_node, {"model": model, "node": "sm", "input_index": 0}),
        "remove_node": (gk.remove_node, {"model": model, "node": "dead", "downstream": False}),
        "insert_node": (gk.insert_node, {"model": model, "after": "m", "op_type": "Relu", "inputs": (),
                                         "attributes": None, "name": None, "output": None, "domain": ""}),
        "set_initializer": (gk.set_initializer, {"model": model, "tensor": "w", "value": np.zeros(4, np.float32),
                                                 "allow_reshape": False}),
        "initializer_to_input": (gk.initializer_to_input, {"model": model, "tensor": "w", "input_name": None}),
        "constant_to_input": (gk.constant_to_input, {"model": model, "tensor": "c", "input_name": "k"}),
        "input_to_initializer": (gk.input_to_initializer, {"model": model, "tensor": "x",
                                                           "value": np.ones((1, 4), np.float32)}),
        "set_dims": (gk.set_dims, {"model": model, "tensor": "x", "dims": {0: 2}}),
        "replace_dim": (gk.replace_dim, {"model": model, "dim": "batch", "new": 2, "check": True}),
        "replace_op": (gk.replace_op, {"model": model, "old_op": "Softmax", "new_op_type": "Identity",
                                       "new_domain": "", "drop_attributes": True}),
        "set_opset": (gk.set_opset, {"model": model, "domain": "", "version": 18}),
        "cleanup": (gk.cleanup, {"model": model, "inputs": True}),
        "fold_constants": (gk.fold_constants, {"model": model, "max_bytes": 1024, "progress": None}),
        "simplify": (gk.simplify, {"model": model, "max_bytes": 1024, "check": True, "progress": None,
                                   "target": "onnxruntime"}),
        "constants_to_initializers": (gk.constants_to_initializers, {"model": model, "check": True}),
        "remove_identities": (gk.remove_identities, {"model": model, "check": True}),
        "fold_shapes": (gk.fold_shapes, {"model": model, "check": True}),
        "merge_constants": (gk.merge_constants, {"model": model, "check": True}),
        "fuse_gemm": (gk.fuse_gemm, {"model": model, "check": True}),
        "fuse_conv": (gk.fuse_conv, {"model": model, "max_bytes": 1024, "check": True}),
        "fuse_attention": (gk.fuse_attention, {"model": model, "max_bytes": 1024, "check": True}),
        "fuse_gelu": (gk.fuse_gelu, {"model": model, "check": True}),
        "fuse_skip_layernorm": (gk.fuse_skip_layernorm, {"model": model, "check": True}),
        "merge_nodes": (gk.merge_nodes, {"model": model, "check": True}),
        "inline_branches": (gk.inline_branches, {"model": model, "check": True}),
        "simplify_with_report": (gk.simplify_with_report, {"model": model, "max_bytes": 1024, "check": True,
                                                           "passes": ["fold", "dead"], "progress": None,
                                                           "target": "onnx"}),
        "replace_span": (gk.replace_span, {"model": model, "inputs": ["m"], "outputs": ["s"],
                                           "replacement": relu.build()}),
        "rename_pattern": (gk.rename_pattern, {"model": model, "pattern": "^m$", "replacement": "m2", "prefix": "",
                                               "scope": "all"}),
        "add_output": (gk.add_output, {"model": model, "tensor": "m"}),
        "remove_output": (gk.remove_output, {"model": gk.expose(model, ["m"]), "tensor": "m"}),
        "merge": (gk.merge, {"a": model, "b": model, "connect": {"y": "x"}, "prefixes": ("a/", "b/"),
                             "outputs": None, "share_inputs": True}),
        "to_graphsurgeon": (gk.to_graphsurgeon, {"model": model}),
        "from_graphsurgeon": (gk.from_graphsurgeon, {"graph": gk.to_graphsurgeon(model), "like": model}),
        "apply_recipe": (gk.apply_recipe, {"model": model, "recipe": [{"op": "cleanup"}], "check": True}),
        "load_recipe": (gk.load_recipe, {"path": recipe}),
        "make_feeds": (gk.make_feeds, {"model": model, "feeds": None, "feed_options": gk.FeedOptions()}),
        "run": (gk.run, {"model": model, "feeds": {"x": np.ones((1, 4), np.float32)}, "outputs": ["s"],
                         "feed_options": gk.FeedOptions(), "provider": "cpu", "opt_level": "all", "threads": 1,
                         "provider_options": {"arena_extend_strategy": "kSameAsRequested"}, "custom_ops": [],
                         "python_ops": [python_op]}),
        "custom_op": (gk.custom_op, {"domain": "my", "op_type": "Twice", "outputs": ["float32"]}),
        "load_python_ops": (gk.load_python_ops, {"path": ops_file}),
        "run_detailed": (gk.run_detailed, {"model": model, "feeds": None, "outputs": None,
                                           "feed_options": gk.FeedOptions(shapes={"x": [2, 4]}), "threads": 0}),
        "run_chain": (gk.run_chain, {"fragments": parts, "feeds": None, "reference": model,
                                     "feed_options": gk.FeedOptions(), "tolerance": gk.Tolerance(),
                                     "provider": "cpu", "opt_level": "all", "threads": 0, "progress": None}),
        "compare": (gk.compare, {"model": model, "other": model, "reference": None, "backend": None,
                                 "candidate_backend": "ort", "feeds": None, "feed_options": gk.FeedOptions(),
                                 "tolerance": gk.Tolerance(), "tolerances": {"y": gk.Tolerance()},
                                 "mapping": {"y": "y"}, "tensors": None, "constants": False,
                                 "marker_spec": ("my", "Debug", "name"), "fragment_bytes": 2**20,
                                 "local_checks": 4, "progress": None, "provider": "cpu",
                                 "reference_provider": None, "candidate_provider": "cpu",
                                 "provider_options": None, "custom_ops": (), "python_ops": [ops_file],
                                 "check_finite": False}),
        "check_finite": (gk.check_finite, {"model": model, "feeds": None, "feed_options": gk.FeedOptions(),
                                           "backend": "ort", "provider": "cpu", "provider_options": None,
                                           "custom_ops": (), "python_ops": (), "fragment_bytes": 2**20}),
        "reduce": (gk.reduce, {"model": broken, "other": None, "fails_on": "run", "feeds": None,
                               "feed_options": gk.FeedOptions(), "backend": None, "candidate_backend": "ort",
                               "tolerance": gk.Tolerance(), "provider": "cpu", "reference_provider": None,
                               "candidate_provider": None, "provider_options": None, "custom_ops": (),
                               "python_ops": (), "divergence": None, "progress": None}),
        "save_repro": (gk.save_repro, {"reduction": gk.reduce(broken), "outdir": tmp / "repro", "overwrite": True}),
        "markers": (gk.markers, {"model": markers, "domain": "my", "op": "Debug", "attr": "name", "expose": True}),
        "FeedOptions": (gk.FeedOptions, {"seed": 0, "shapes": {"x": [1, 4]}, "dims": {"batch": 1},
                                         "ranges": {"x": (0, 1)}, "default_dim": 1}),
        "Tolerance": (gk.Tolerance, {"atol": 1e-5, "rtol": 1e-3}),
        "Model": (gk.Model, {"proto": model.proto, "base_dir": tmp, "path": None}),
        "TensorType": (gk.TensorType, {"dtype": "float32", "shape": ("batch", 4)}),
    }


def _call(func: Callable[..., Any], args: dict[str, Any]) -> Any:
    """Call with positional-only parameters by position and the rest by keyword."""
    params = inspect.signature(func).parameters
    positional = [args[n] for n, p in params.items() if p.kind == p.POSITIONAL_ONLY and n in args]
    keywords = {n: v for n, v in args.items() if params[n].kind != inspect.Parameter.POSITIONAL_ONLY}
    return func(*positional, **keywords)


def test_the_table_covers_every_exported_callable(tmp_path: Path) -> None:
    table = _table(tmp_path)
    functions = {n for n in gk.__all__ if inspect.isfunction(getattr(gk, n))}
    option_types = {"FeedOptions", "Tolerance", "TensorType", "GraphBuilder", "Model"}
    assert functions | option_types == {name for name in table if "." not in name}
    for name, (func, args) in table.items():
        _call(func, args)  # each baseline call is valid
        assert set(args) <= set(inspect.signature(func).parameters), name


def test_hostile_arguments_raise_graphkit_errors_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path)
    monkeypatch.chdir(tmp_path)  # (a name given as a path is written here, not into the repository)
    rng = random.Random(20260)
    raw: list[str] = []
    for name, (func, args) in sorted(table.items()):
        for param in args:
            values = HOSTILE if name not in ("run_chain", "compare", "run", "run_detailed", "fold_constants", "check_finite",
                                             "reduce", "save_repro",
                                             "simplify", "simplify_with_report") \
                else rng.sample(HOSTILE, 10)
            for value in values:
                try:
                    _call(func, {**args, param: value})
                except gk.GraphkitError:
                    pass
                except Exception as err:  # the defect this test exists to find
                    raw.append(f"{name}({param}={value!r}): {type(err).__name__}: {err}"[:200])
    assert not raw, "\n".join(raw)


@pytest.mark.parametrize(("call", "keyword", "kind"), [
    (lambda m: gk.split(m, parts=2.5), "parts", TypeError),
    (lambda m: gk.extract(m, inputs=[None], outputs=["y"]), "inputs", TypeError),
    (lambda m: gk.run(m, feed_options=gk.FeedOptions(shapes={"x": "abc"})), "shapes", TypeError),
    (lambda m: gk.compare(m, m, mapping={"a": 5}), "mapping", TypeError),
    (lambda m: gk.save(m, "a\0b.onnx"), "path", ValueError),
    (lambda m: gk.run(m, threads=-1), "threads", ValueError),
    (lambda m: gk.compare(m, tolerance=gk.Tolerance(math.nan)), "atol", ValueError),
    (lambda m: gk.set_dims(m, "x", {0: 2.5}), "dims", TypeError),
    (lambda m: gk.extract(m, "x", ["y"]), "inputs", TypeError),
    (lambda m: gk.set_opset(m, domain="\udcff", version=17), "domain", ValueError),
    (lambda m: gk.rename_tensor(m, "m", "bad\udcffname"), "new", ValueError),
])
def test_issue_reproductions_name_the_keyword(call: Callable[[gk.Model], Any], keyword: str, kind: type) -> None:
    with pytest.raises(gk.UsageError) as err:
        call(_tiny())
    assert isinstance(err.value, kind)
    assert f"{keyword}" in err.value.message and err.value.hint


def test_wrong_type_is_both_type_and_value_error() -> None:
    with pytest.raises(TypeError):
        gk.split(_tiny(), parts=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        gk.split(_tiny(), parts=2.5)  # type: ignore[arg-type]
    with pytest.raises(gk.ArgumentTypeError) as err:
        gk.extract(_tiny(), inputs="m", outputs=["y"])
    assert "['m']" in err.value.hint


def test_checks_return_normalised_values() -> None:
    assert argcheck.shape(np.array([2, 3]), "shape") == (2, 3)
    assert argcheck.integer(np.int64(5), "n", minimum=0) == 5
    assert argcheck.value_range([0, 1], "r") == (0.0, 1.0)
    assert argcheck.names(("a", "b"), "inputs") == ["a", "b"]
    assert gk.FeedOptions(shapes={"x": [1, 2]}).shapes == {"x": (1, 2)}
    assert gk.TensorType("float32", ["b", 3]).shape == ("b", 3)
