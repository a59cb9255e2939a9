"""Hints speak the caller's language: every user error of every verb, raised through the command line,
names flags (never a Python keyword, ``True``/``False`` or an API call); raised through the API, it
names keywords and functions (never a ``--flag``). A static pass over the package checks the hints no
case here raises."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, fixture
from onnx import TensorProto, helper

import graphkit as gk
from graphkit.cli import main

PACKAGE = ROOT / "graphkit"

#: A command-line flag.
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
#: A flag with its value (``--value ids=[[1,2,3]]``, ``--set-dtype input=uint8``), dropped before looking
#: for Python words: the value is what the user types on the command line.
_FLAG_AND_VALUE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:[ =](?:'[^']*'|\"[^\"]*\"|\S+))?")
#: What Python looks like: a keyword argument, a boolean or None as a word, a call of the API.
_API_FUNCTIONS = "|".join(sorted(n for n in gk.__all__ if n[0].islower()))
_PYTHON = re.compile(rf"\b[a-z_]+=(?:True|False|None|[\[{{('\"]|\d|(?=[\s,;)]|$))|\b(?:True|False)\b|\bgk\.\w+|"
                     rf"\b(?:{_API_FUNCTIONS})\(")


def python_words(text: str) -> list[str]:
    """The Python keywords and calls in a text meant for the command line."""
    return [m.group(0) for m in _PYTHON.finditer(_FLAG_AND_VALUE.sub(" ", text))]


def flags(text: str) -> list[str]:
    return _FLAG.findall(text)


# ------------------------------------------------------------------------------------------ models

W = "whole_model.onnx"
C21 = "/convs2/convs2.1/Conv_output_0"


def _save(proto: Any, path: Path) -> Path:
    gk.save(gk.Model(proto), path)
    return path


def _unranked(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "unranked",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp / "unranked.onnx")


def _broadcast_add(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1)], "old_add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3), tmp / "old.onnx")


def _cycle(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["a"], name="first"),
                               helper.make_node("Relu", ["a"], ["b"], name="second")], "cycle",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp / "cycle.onnx")


def _contradiction(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"], name="sum")], "bad_add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp / "contradiction.onnx")


def _duplicate_names(tmp: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="dup"),
                               helper.make_node("Relu", ["r"], ["y"], name="dup")], "dups",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp / "dups.onnx")


def _two_arrays(tmp: Path) -> Path:
    path = tmp / "two.npz"
    np.savez(path, first=np.zeros((1, 3, 20, 20), np.float32), second=np.zeros(2, np.float32))
    return path


def _function(tmp: Path) -> Path:
    return _save(gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
        g (float[4] x) => (float[4] y) {
            y = local.Block(x)
        }
        <domain: "local", opset_import: ["" : 17]>
        Block (a) => (b) {
            b = Relu(a)
        }""").proto, tmp / "function.onnx")


def _renamed_input(tmp: Path) -> Path:
    return _save(gk.rename_tensor(gk.load(fixture("linear_func.onnx")), "a", "alpha").proto, tmp / "renamed.onnx")


def _unknown_reference(tmp: Path) -> Path:
    path = tmp / "unknown.npz"
    np.savez(path, zzzzzzzzzzzzzzzzzzzz=np.zeros((10, 10), np.float32))
    return path


def _reference(tmp: Path) -> Path:
    path = tmp / "ref.npz"
    np.savez(path, output=np.zeros((10, 10), np.float32))
    return path


# ------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One user error: the command line that causes it and the API call that causes it (None: only
    the command line can, e.g. a file argument)."""

    name: str
    argv: Callable[[Path], list[str]]
    api: Callable[[Path], Any] | None
    expect: str  # (a piece of the message, to be sure the intended error is the one raised)
    api_expect: str | None = None  # (where the API's message differs)


def f(name: str) -> str:
    return str(fixture(name))


def load(name: str) -> gk.Model:
    return gk.load(fixture(name))


CASES = [
    # inspect
    Case("inspect --shape unknown input", lambda t: ["inspect", f(W), "--nodes", "--shape", "inpt=1x3x20x20"],
         lambda t: gk.list_nodes(load(W), shapes={"inpt": [1, 3, 20, 20]}), "'inpt'"),
    Case("inspect --shape wrong rank", lambda t: ["inspect", f(W), "--nodes", "--shape", "input.1=1x3"],
         lambda t: gk.list_nodes(load(W), shapes={"input.1": [1, 3]}), "has 2 dims"),
    Case("inspect missing file", lambda t: ["inspect", str(t / "nope.onnx")], lambda t: gk.load(t / "nope.onnx"),
         "nope.onnx"),
    # infer-shapes, toposort, check
    Case("infer-shapes contradiction", lambda t: ["infer-shapes", str(_contradiction(t)), str(t / "o.onnx")],
         lambda t: gk.infer_shapes(gk.load(_contradiction(t))), "contradicts"),
    Case("toposort cycle", lambda t: ["toposort", str(_cycle(t)), str(t / "o.onnx")],
         lambda t: gk.toposort(gk.load(_cycle(t))), "cycle"),
    # extract, expose
    Case("extract open cut", lambda t: ["extract", f(W), str(t / "o.onnx"), "--inputs", C21, "--outputs", "output"],
         lambda t: gk.extract(load(W), [C21], ["output"]), "cannot compute 'output'"),
    Case("extract graph input left out", lambda t: ["extract", f(W), str(t / "o.onnx"), "--inputs", C21,
                                                    "--outputs", "input.1"],
         lambda t: gk.extract(load(W), [C21], ["input.1"]), "graph input"),
    Case("extract unknown name", lambda t: ["extract", f(W), str(t / "o.onnx"), "--inputs", "input.1",
                                            "--outputs", "zzzzzzzzzzzzzzzzzzzz"],
         lambda t: gk.extract(load(W), ["input.1"], ["zzzzzzzzzzzzzzzzzzzz"]), "'zzzzzzzzzzzzzzzzzzzz'"),
    Case("extract name twice", lambda t: ["extract", f(W), str(t / "o.onnx"), "--inputs", "input.1", "input.1",
                                          "--outputs", "output"],
         lambda t: gk.extract(load(W), ["input.1", "input.1"], ["output"]), "twice"),
    Case("expose unknown tensor", lambda t: ["expose", f(W), str(t / "o.onnx"), "--tensors", "zzzzzzzzzzzzzzzz"],
         lambda t: gk.expose(load(W), ["zzzzzzzzzzzzzzzz"]), "'zzzzzzzzzzzzzzzz'"),
    # split, run-chain
    Case("split too many parts", lambda t: ["split", f(W), str(t / "parts"), "--parts", "50"],
         lambda t: gk.split(load(W), parts=50), "11 nodes"),
    Case("split at a graph input", lambda t: ["split", f(W), str(t / "parts"), "--at", "input.1"],
         lambda t: gk.split(load(W), at=["input.1"]), "graph input"),
    Case("run-chain nothing to run", lambda t: ["run-chain", str(t)], lambda t: gk.run_chain([]), "no split manifest",
         "no fragments"),
    # run
    Case("run --shape unknown input", lambda t: ["run", f(W), "--shape", "inpt=1x3x20x20"],
         lambda t: gk.run(load(W), feed_options=gk.FeedOptions(shapes={"inpt": [1, 3, 20, 20]})), "'inpt'"),
    Case("run an unranked input", lambda t: ["run", str(_unranked(t))], lambda t: gk.run(gk.load(_unranked(t))),
         "no known rank"),
    Case("run missing custom-op library", lambda t: ["run", f(W), "--custom-ops", str(t / "nope.so")],
         lambda t: gk.run(load(W), custom_ops=[t / "nope.so"]), "nope.so"),
    Case("run --input key missing from an npz", lambda t: ["run", f(W), "--input", f"input.1={_two_arrays(t)}"],
         None, "none is named 'input.1'"),
    Case("run unknown provider", lambda t: ["run", f(W), "--provider", "cuda"],
         lambda t: gk.run(load(W), provider="cuda"), "cuda"),
    # edit
    Case("edit bypass input index", lambda t: ["edit", f("linear_func.onnx"), str(t / "o.onnx"), "--bypass", "Add=5"],
         lambda t: gk.bypass_node(load("linear_func.onnx"), "Add", 5), "no input #5"),
    Case("edit remove a node still read", lambda t: ["edit", f(W), str(t / "o.onnx"), "--remove-node",
                                                     "/convs1/convs1.0/Conv"],
         lambda t: gk.remove_node(load(W), "/convs1/convs1.0/Conv"), "dangling"),
    Case("edit initializer of another shape", lambda t: ["edit", f("srcnn.onnx"), str(t / "o.onnx"),
                                                         "--set-initializer", "conv1.bias=[1, 2]"],
         lambda t: gk.set_initializer(load("srcnn.onnx"), "conv1.bias", [1.0, 2.0]), "shape"),
    Case("edit replace-op drops attributes", lambda t: ["edit", f("debug_markers.onnx"), str(t / "o.onnx"),
                                                        "--replace-op", "my::Debug=Identity"],
         lambda t: gk.replace_op(load("debug_markers.onnx"), "my::Debug", "Identity"), "['name']"),
    Case("edit operator from a later opset", lambda t: ["edit", f("linear_func.onnx"), str(t / "o.onnx"),
                                                        "--set-op-type", "Add=Gelu"],
         lambda t: gk.set_op_type(load("linear_func.onnx"), "Add", "Gelu"), "introduced in opset 20"),
    Case("edit set-opset relabel", lambda t: ["edit", str(_broadcast_add(t)), str(t / "o.onnx"), "--set-opset",
                                              "ai.onnx=7"],
         lambda t: gk.set_opset(gk.load(_broadcast_add(t)), "", 7), "relabels"),
    Case("edit an opset ONNX does not know", lambda t: ["edit", f(W), str(t / "o.onnx"), "--set-opset", "ai.onnx=99"],
         lambda t: gk.set_opset(load(W), "", 99), "has no opset 99"),
    Case("edit ambiguous dim", lambda t: ["edit", f("model_static.onnx"), str(t / "o.onnx"), "--dynamic-dim", "10=side"],
         lambda t: gk.replace_dim(load("model_static.onnx"), 10, "side"), "cannot be guessed"),
    Case("edit no change", lambda t: ["edit", f("linear_func.onnx"), str(t / "o.onnx"), "--cleanup"],
         lambda t: gk.cleanup.__wrapped__(load("linear_func.onnx")), "changes nothing"),  # type: ignore[attr-defined]
    Case("edit unknown tensor", lambda t: ["edit", f(W), str(t / "o.onnx"), "--rename", "zzzzzzzzzzzzzzzzzzzz=q"],
         lambda t: gk.rename_tensor(load(W), "zzzzzzzzzzzzzzzzzzzz", "q"), "'zzzzzzzzzzzzzzzzzzzz'"),
    Case("edit set-dtype unknown", lambda t: ["edit", f(W), str(t / "o.onnx"), "--set-dtype",
                                              "zzzzzzzzzzzzzzzz=float16"],
         lambda t: gk.set_dtype(load(W), "zzzzzzzzzzzzzzzz", "float16"), "'zzzzzzzzzzzzzzzz'"),
    Case("edit an empty prefix", lambda t: ["edit", f(W), str(t / "o.onnx"), "--prefix", ""],
         lambda t: gk.rename_pattern(load(W), prefix=""), "needs a pattern or a prefix"),
    Case("edit a pattern that is no regular expression", lambda t: ["edit", f(W), str(t / "o.onnx"),
                                                                     "--rename-pattern", "(=x"],
         lambda t: gk.rename_pattern(load(W), "(", "x"), "not a valid regular expression"),
    Case("edit the only output", lambda t: ["edit", f("linear_func.onnx"), str(t / "o.onnx"), "--remove-output",
                                            "output"],
         lambda t: gk.remove_output(load("linear_func.onnx"), "output"), "only graph output"),
    Case("edit fold nothing", lambda t: ["edit", f("linear_func.onnx"), str(t / "o.onnx"), "--fold-constants"],
         lambda t: gk.fold_constants.__wrapped__(load("linear_func.onnx")), "constants"),  # type: ignore[attr-defined]
    Case("edit duplicate node names", lambda t: ["edit", str(_duplicate_names(t)), str(t / "o.onnx"), "--set-op-type",
                                                 "dup=Sigmoid"],
         lambda t: gk.set_op_type(gk.load(_duplicate_names(t)), "dup", "Sigmoid"), "2 nodes are named 'dup'"),
    Case("edit a later step's unknown name", lambda t: ["edit", f(W), str(t / "o.onnx"), "--cleanup", "--rename",
                                                        "zzzzzzzzzzzzzzzzzzzz=q"],
         lambda t: gk.apply_recipe(load(W), [{"op": "cleanup"}, {"op": "rename_tensor", "old": "zzzzzzzzzzzzzzzzzzzz",
                                                                  "new": "q"}]), "checked before any step ran"),
    Case("edit a local function's tensor", lambda t: ["edit", str(_function(t)), str(t / "o.onnx"), "--fixed",
                                                      "Block/a:0=4"],
         lambda t: gk.set_dims(gk.load(_function(t)), "Block/a", {0: 4}), "of local function 'Block'"),
    # merge
    Case("merge clashing outputs", lambda t: ["merge", f("linear_func.onnx"), f("linear_func.onnx"),
                                              str(t / "o.onnx"), "--no-share-inputs"],
         lambda t: gk.merge(load("linear_func.onnx"), load("linear_func.onnx"), share_inputs=False), "'"),
    # compare, markers
    Case("compare the same side twice", lambda t: ["compare", f("linear_func.onnx"), "--backend", "ort-noopt",
                                                   "--candidate-backend", "ort-noopt"],
         lambda t: gk.compare(load("linear_func.onnx"), backend="ort-noopt", candidate_backend="ort-noopt"),
         "nothing to compare"),
    Case("compare renamed input", lambda t: ["compare", f("linear_func.onnx"), str(_renamed_input(t))],
         lambda t: gk.compare(load("linear_func.onnx"), gk.load(_renamed_input(t))), "'alpha'"),
    Case("compare --backend with --reference", lambda t: ["compare", f("linear_func.onnx"), "--reference",
                                                          str(_reference(t)), "--backend", "ort"],
         lambda t: gk.compare(load("linear_func.onnx"), reference=_reference(t), backend="ort"), "backend"),
    Case("compare reference values of no tensor", lambda t: ["compare", f("linear_func.onnx"), "--reference",
                                                             str(_unknown_reference(t))],
         lambda t: gk.compare(load("linear_func.onnx"), reference=_unknown_reference(t)), "none of the 1 names"),
    Case("compare marker without its name attribute", lambda t: ["compare", f("debug_markers.onnx"),
                                                                 "--marker-attr", "nm"],
         lambda t: gk.compare(load("debug_markers.onnx"), marker_spec=("my", "Debug", "nm")), "'nm'"),
    Case("markers of another domain", lambda t: ["markers", f("debug_markers.onnx"), str(t / "o.onnx"), "--domain",
                                                 "zz"],
         lambda t: gk.markers(load("debug_markers.onnx"), domain="zz"), "no zz::Debug marker"),
    Case("markers without the name attribute", lambda t: ["markers", f("debug_markers.onnx"), str(t / "o.onnx"),
                                                          "--attr", "nm"],
         lambda t: gk.markers(load("debug_markers.onnx"), attr="nm"), "'nm'"),
    # reduce
    Case("reduce a model that runs", lambda t: ["reduce", f(W), str(t / "repro")], lambda t: gk.reduce(load(W)),
         "nothing to reduce"),
    Case("reduce two models without compare", lambda t: ["reduce", f(W), str(t / "repro"), "--candidate", f(W)],
         lambda t: gk.reduce(load(W), load(W)), "second model"),
    # view, check, convert, diff
    Case("view around an unknown node", lambda t: ["view", f(W), "--around", "zzzzzzzzzzzzzzzz", "--no-browser"], None,
         "'zzzzzzzzzzzzzzzz'"),
    Case("check missing file", lambda t: ["check", str(t / "nope.onnx")], lambda t: gk.validate(gk.load(t / "nope.onnx")),
         "nope.onnx"),
    Case("convert keep an unknown node", lambda t: ["convert", f(W), str(t / "o.onnx"), "--float16", "--keep-node",
                                                    "zzzzzzzzzzzzzzzz"],
         lambda t: gk.to_float16(load(W), keep_node=["zzzzzzzzzzzzzzzz"]), "'zzzzzzzzzzzzzzzz'"),
    Case("convert to an opset ONNX does not know", lambda t: ["convert", f(W), str(t / "o.onnx"), "--opset", "99"],
         lambda t: gk.convert_opset(load(W), 99), "99"),
    Case("convert an operator the converter cannot", lambda t: ["convert", f(W), str(t / "o.onnx"), "--opset", "3"],
         lambda t: gk.convert_opset(load(W), 3), "no adapter"),
    Case("simplify a model that contradicts itself", lambda t: ["simplify", str(_contradiction(t)), str(t / "o.onnx")],
         lambda t: gk.simplify(gk.load(_contradiction(t))), "contradicts"),
    Case("diff missing file", lambda t: ["diff", f(W), str(t / "nope.onnx")], None, "nope.onnx"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_cli_errors_name_flags_and_api_errors_name_keywords(case: Case, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(case.argv(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("graphkit: error: ") and "Traceback" not in err, err
    assert case.expect in err, err
    assert python_words(err) == [], err
    if case.api is None:
        return
    with pytest.raises(gk.GraphkitError) as raised:
        case.api(tmp_path)
    said = f"{raised.value.message}\nhint: {raised.value.hint or ''}"
    assert (case.api_expect or case.expect) in said, said
    assert flags(said) == [], said


# ------------------------------------------------------------------------------------------ static


def _text(node: ast.AST) -> str:
    """The literal text of a string expression; ``{}`` where a value is put in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(v) if not isinstance(v, ast.FormattedValue) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return _text(node.body) + " | " + _text(node.orelse)
    if isinstance(node, ast.BoolOp):
        return " | ".join(_text(v) for v in node.values)
    return "{}"


#: Where a hint may name Python for the command line too: a Python argument of the wrong type (only
#: the API passes one), the builders and the graphsurgeon bridge (API only), and the Python operators a
#: --python-ops file declares.
_PYTHON_ANYWHERE = {"_build.py", "_custom_ops.py", "_check_args.py", "graphsurgeon.py"}


def _called(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")


def test_every_hint_in_the_package_speaks_its_callers_language() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        cli = path.parent.name == "cli"
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call):
                continue
            words = {k.arg: _text(k.value) for k in call.keywords if k.arg in ("hint", "cli_hint")}
            if not words:
                continue
            where = f"{path.relative_to(ROOT)}:{call.lineno}"
            hint, cli_hint = words.get("hint", ""), words.get("cli_hint")
            if cli:  # (a value put in before a word is most often the flag it belongs to: "e.g. {flag} K=V")
                wrong += [f"{where}: CLI hint names Python {w!r}" for w in python_words(hint.replace("{} ", "--x "))]
                continue
            message = _text(call.args[0]) if call.args else ""
            wrong += [f"{where}: API message names {w!r}" for w in flags(message)]
            wrong += [f"{where}: API hint names {w!r}" for w in flags(hint)]
            if cli_hint is not None:
                wrong += [f"{where}: cli_hint names Python {w!r}" for w in python_words(cli_hint)]
            elif path.name not in _PYTHON_ANYWHERE and _called(call) != "ArgumentTypeError":
                wrong += [f"{where}: hint names Python {w!r} and has no cli_hint" for w in python_words(hint)]
    assert wrong == [], "\n".join(wrong)


def test_the_word_checks_tell_python_from_flags() -> None:
    assert python_words("remove its readers too (downstream=True)") == ["downstream=True"]
    assert python_words("use gk.split(model, parts=3)") == ["gk.split", "parts=3"]
    assert python_words("give pattern= (and replacement=), or prefix=") == ["pattern=", "replacement=", "prefix="]
    assert python_words("e.g. --value ids=[[1,2,3]] or --set-attr /conv.group=1") == []
    assert python_words("drop this edit, or pass --allow-noop") == []
    assert flags("give its shape, e.g. shapes={'x': [1, 3]}") == []
    assert flags("pass --fails-on compare") == ["--fails-on"]
