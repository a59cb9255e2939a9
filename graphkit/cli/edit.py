"""edit IN OUT [EDITS…] [--recipe FILE]: change a model without PyTorch; the result is validated before it is written.

Edits apply in the order given on the command line; a --recipe's steps apply at its position.
Each option is one step of a recipe (see --save-recipe), so a command line can be kept and replayed.
--operand, --attr, --scope, --allow-reshape and --drop-attributes change the step just before them.
Every step's names are looked up before the first step runs. A step that changes nothing among
others is a note; an edit where no step changes anything is an error (exit 2) unless --allow-noop.

Nodes are named by NAME (in any graph, bodies included), #N (the N-th node of the main graph, from 0),
OP#K (the K-th node of operator OP in the main graph, from 0: Conv#2, my::Debug#0) or FUNCTION/NODE
(a node of local function FUNCTION, by name, #N or OP#K). A node's own name wins over the others.
--rename, --insert-after and --set-initializer (a Constant's value) reach a local function's tensor
as FUNCTION/TENSOR; edits of declared types and graph inputs/outputs do not (a function is typed
where it is called).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graphkit import _io as io
from graphkit._files import MAX_NESTING, json_depth
from graphkit._infer import change_text, changed_outputs
from graphkit._model import Model
from graphkit._numbers import INT64_MAX, parse_int
from graphkit._progress import Progress
from graphkit._recipe import MODEL_ARGS, Step, dump_recipe, load_recipe, run_steps
from graphkit.cli import _common, _render
from graphkit.errors import GraphkitError, UsageError

EXAMPLES = """examples:
  python -m graphkit edit linear_func.onnx out.onnx --set-op-type Add=Sub
  python -m graphkit edit srcnn.onnx out.onnx --input-from-constant /Constant_output_0=factor
  python -m graphkit edit model_static.onnx out.onnx --dynamic in:0=batch
  python -m graphkit edit debug_markers.onnx out.onnx --replace-op my::Debug=Identity --drop-attributes --save-recipe r.yaml
  python -m graphkit edit next_version.onnx out.onnx --recipe r.yaml
"""


def _pair(text: str, flag: str, sep: str = "=") -> tuple[str, str]:
    left, found, right = text.partition(sep)
    if not found or not left:
        raise UsageError(f"{flag} {text!r}: expected LEFT{sep}RIGHT", hint=f"e.g. {flag} {_EXAMPLE.get(flag, 'A=B')}")
    return left, right


_EXAMPLE = {
    "--set-attr": "/conv1/Conv.group=1", "--remove-attr": "/conv1/Conv.group", "--set-op-type": "Add=Sub",
    "--rename": "old_name=new_name", "--rename-node": "old=new", "--insert-after": "x=Relu",
    "--set-initializer": "conv1.bias=bias.npy", "--freeze": "scale=[1.0]", "--dynamic": "input:0=batch",
    "--fixed": "input:0=1", "--replace-op": "com.example::MyGelu=Gelu", "--set-opset": "ai.onnx=17",
    "--set-dtype": "input=uint8",
    "--fixed-dim": "batch=1", "--dynamic-dim": "1=batch",
}


def _json_or_text(text: str, flag: str) -> Any:
    """A JSON value (nested at most MAX_NESTING deep), or the text itself when it is not JSON."""
    if json_depth(text, MAX_NESTING) > MAX_NESTING:
        raise UsageError(f"{flag}: the value nests brackets more than {MAX_NESTING} deep",
                         hint="give a JSON value a few levels deep, or a .npy file")
    try:
        return json.loads(text)
    except ValueError:  # not JSON (a name, a path): the text itself
        return text


def _value(text: str, flag: str) -> Any:
    """A .npy file (kept as {"npy": absolute path}) or a JSON value."""
    if text.endswith(".npy"):
        return {"npy": str(Path(text).resolve())}
    return _json_or_text(text, flag)


def _node_attr(text: str, flag: str) -> tuple[str, str]:
    node, dot, name = text.rpartition(".")
    if not dot or not node or not name:
        raise UsageError(f"{flag} {text!r}: expected NODE.ATTRIBUTE", hint=f"e.g. {flag} {_EXAMPLE[flag]}")
    return node, name


def _split_op(text: str) -> tuple[str, str | None]:
    domain, sep, op = text.rpartition("::")
    return (op, domain) if sep else (text, None)


def _dims(text: str, flag: str, fixed: bool) -> Step:
    left, right = _pair(text, flag)
    tensor, colon, axis = left.rpartition(":")
    hint = f"e.g. {flag} {_EXAMPLE[flag]}"
    if not colon or not tensor or not axis:
        raise UsageError(f"{flag} {text!r}: expected TENSOR:AXIS={'SIZE' if fixed else 'NAME'}", hint=hint)
    index = parse_int(axis, what=f"{flag} {text!r}: axis", lo=-_MAX_AXIS, hi=_MAX_AXIS - 1, hint=hint)
    dim: Any
    if fixed:
        dim = parse_int(right, what=f"{flag} {text!r}: size", lo=0, hi=INT64_MAX, hint=hint)
    else:
        dim = None if right in ("", "?") else right
    return Step("set_dims", {"tensor": tensor, "dims": {str(index): dim}})


def _replace_dim(text: str, flag: str) -> Step:
    left, right = _pair(text, flag)
    hint = f"e.g. {flag} {_EXAMPLE[flag]}"
    if flag == "--fixed-dim":
        if not right:
            raise UsageError(f"{flag} {text!r}: expected NAME=SIZE", hint=hint)
        new: Any = parse_int(right, what=f"{flag} {text!r}: size", lo=0, hi=INT64_MAX, hint=hint)
        return Step("replace_dim", {"dim": left, "new": new})
    if not right or right.isdigit():
        raise UsageError(f"{flag} {text!r}: expected SIZE_OR_NAME[@AXIS]=NAME (the new name is not a number)",
                         hint=hint)
    left, at, axis_text = left.partition("@")
    old: Any = parse_int(left, what=f"{flag} {text!r}: size", lo=0, hi=INT64_MAX, hint=hint) if left.isdigit() else left
    args: dict[str, Any] = {"dim": old, "new": right}
    if at:
        args["axis"] = parse_int(axis_text, what=f"{flag} {text!r}: axis", lo=-_MAX_AXIS, hi=_MAX_AXIS - 1, hint=hint)
    return Step("replace_dim", args)


#: Axes beyond this are typos (no tensor has this many dims).
_MAX_AXIS = 1 << 16


def _set_attr(text: str) -> Step:
    left, right = _pair(text, "--set-attr")
    node, name = _node_attr(left, "--set-attr")
    return Step("set_attribute", {"node": node, "attribute": name, "value": _value(right, "--set-attr")})


def _remove_attr(text: str) -> Step:
    node, name = _node_attr(text, "--remove-attr")
    return Step("remove_attribute", {"node": node, "attribute": name})


def _set_op_type(text: str) -> Step:
    node, target = _pair(text, "--set-op-type")
    op, domain = _split_op(target)
    args: dict[str, Any] = {"node": node, "op_type": op}
    if domain is not None:
        args["domain"] = domain
    return Step("set_op_type", args)


def _renamed(op: str, flag: str) -> Callable[[str], Step]:
    def build(text: str) -> Step:
        old, new = _pair(text, flag)
        return Step(op, {"old": old, "new": new})
    return build


def _bypass(text: str) -> Step:
    node, sep, index = text.rpartition("=")
    if sep and node and index.strip().isdigit():
        number = parse_int(index, what=f"--bypass {text!r}: input index", lo=0, hi=2**31 - 1,
                           hint="e.g. --bypass /Identity=0")
        return Step("bypass_node", {"node": node, "input_index": number})
    return Step("bypass_node", {"node": text})


def _insert_after(text: str) -> Step:
    tensor, target = _pair(text, "--insert-after")
    op, domain = _split_op(target)
    return Step("insert_node", {"after": tensor, "op_type": op, **({"domain": domain} if domain else {})})


def _to_input(op: str, flag: str) -> Callable[[str], Step]:
    def build(text: str) -> Step:
        name, sep, new = text.partition("=")
        return Step(op, {"tensor": name, **({"input_name": new} if sep and new else {})})
    return build


def _with_value(op: str, flag: str) -> Callable[[str], Step]:
    def build(text: str) -> Step:
        name, value = _pair(text, flag)
        return Step(op, {"tensor": name, "value": _value(value, flag)})
    return build


def _replace_op(text: str) -> Step:
    op, target = _pair(text, "--replace-op")
    new_op, domain = _split_op(target)
    return Step("replace_op", {"old_op": op, "new_op_type": new_op, **({"new_domain": domain} if domain else {})})


def _set_opset(text: str) -> Step:
    domain, version = _pair(text, "--set-opset")
    number = parse_int(version, what=f"--set-opset {text!r}: version", lo=1, hi=INT64_MAX,
                       hint="e.g. --set-opset ai.onnx=17")
    return Step("set_opset", {"domain": domain, "version": number})


def _set_dtype(text: str) -> Step:
    tensor, dtype = _pair(text, "--set-dtype")
    return Step("set_dtype", {"tensor": tensor, "dtype": dtype})


def _fold(text: str | None) -> Step:
    if text is None:
        return Step("fold_constants", {})
    number = parse_int(text, what="--fold-constants: byte count", lo=0, hi=INT64_MAX,
                       hint="e.g. --fold-constants 1048576")
    return Step("fold_constants", {"max_bytes": number})


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split at every ``sep`` not escaped by a backslash, keeping the escapes (``_unescape`` drops them)."""
    parts, current, i = [], [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        if char == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


_SPAN_HINT = ("e.g. --replace-span x:ln_out=layer_norm.onnx, or by name --replace-span x=input:ln_out=output=ln.onnx; "
              "write \\: \\, \\= for a ':' ',' '=' inside a name")


def _span_side(text: str, flag_text: str, side: str) -> list[str] | dict[str, str]:
    items = [i for i in _split_unescaped(text, ",") if i]
    if not items:
        raise UsageError(f"--replace-span {flag_text!r}: no {side} tensors", hint=_SPAN_HINT)
    pairs = [_split_unescaped(i, "=") for i in items]
    if all(len(p) == 1 for p in pairs):
        return [_unescape(p[0]) for p in pairs]
    if all(len(p) == 2 and p[0] and p[1] for p in pairs):
        return {_unescape(a): _unescape(b) for a, b in pairs}
    raise UsageError(f"--replace-span {flag_text!r}: the {side} mix names and SPAN=MODEL pairs (or hold an empty name)",
                     hint=_SPAN_HINT)


def _replace_span(text: str) -> Step:
    head = _split_unescaped(text, "=")
    if len(head) < 2 or not head[-1]:
        raise UsageError(f"--replace-span {text!r}: expected INPUTS:OUTPUTS=MODEL.onnx", hint=_SPAN_HINT)
    path = _unescape(head[-1])
    sides = _split_unescaped("=".join(head[:-1]), ":")
    if len(sides) != 2:
        raise UsageError(f"--replace-span {text!r}: expected one ':' between the inputs and the outputs "
                         f"(found {len(sides) - 1})", hint=_SPAN_HINT)
    return Step("replace_span", {"inputs": _span_side(sides[0], text, "input"),
                                 "outputs": _span_side(sides[1], text, "output"),
                                 "replacement": os.path.abspath(path)})  # (not resolve(): a link loop is load's error)


def _rename_pattern(text: str) -> Step:
    pattern, sep, replacement = text.rpartition("=")
    if not sep or not pattern:
        raise UsageError(f"--rename-pattern {text!r}: expected REGEX=REPLACEMENT (split at the last '=')",
                         hint="e.g. --rename-pattern '^/model/=' (strip a prefix) or --rename-pattern '/=_'")
    return Step("rename_pattern", {"pattern": pattern, "replacement": replacement})


def _scope(step: Step, text: str) -> Step:
    if text not in ("tensors", "nodes", "all"):
        raise UsageError(f"--scope {text!r}: expected tensors, nodes or all", hint="e.g. --prefix v2/ --scope nodes")
    return Step(step.op, {**step.args, "scope": text})


def _target(step: Step, text: str) -> Step:
    if text not in ("onnx", "onnxruntime"):
        raise UsageError(f"--target {text!r}: expected onnx or onnxruntime", hint="e.g. --simplify --target onnxruntime")
    return Step(step.op, {**step.args, "target": text})


def _operand(step: Step, text: str) -> Step:
    inputs = [*step.args.get("inputs", []), _value(text, "--operand")]
    return Step(step.op, {**step.args, "inputs": inputs})


def _attr(step: Step, text: str) -> Step:
    name, value = _pair(text, "--attr")
    return Step(step.op, {**step.args, "attributes": {**step.args.get("attributes", {}), name: _value(value, "--attr")}})


#: Options that change the step before them: flag → (metavar, the operations they apply to, change, help).
MODIFIERS: dict[str, tuple[str, tuple[str, ...], Callable[[Step, str], Step], str]] = {
    "--operand": ("VALUE", ("insert_node",), _operand,
                  "a further input of the node inserted by the --insert-after before it, in input order: FILE.npy, "
                  "a JSON number or list (a constant of the inserted-after tensor's dtype) or a tensor name"),
    "--attr": ("NAME=VALUE", ("insert_node",), _attr,
               "an attribute of the node inserted by the --insert-after before it; VALUE is JSON or FILE.npy "
               "(a dtype name for Cast's 'to': --attr to=float16)"),
    "--scope": ("tensors|nodes|all", ("rename_pattern",), _scope,
                "what the --rename-pattern or --prefix before it renames (default all)"),
    "--target": ("onnx|onnxruntime", ("simplify",), _target,
                 "what the --simplify before it may write: standard ONNX (onnx, the default) or ONNX Runtime's "
                 "contrib operators too (onnxruntime; the result runs in ONNX Runtime only)"),
    "--allow-reshape": ("", ("set_initializer",), lambda step, _t: Step(step.op, {**step.args, "allow_reshape": True}),
                        "let the --set-initializer before it give the value a new shape"),
    "--drop-attributes": ("", ("replace_op",), lambda step, _t: Step(step.op, {**step.args, "drop_attributes": True}),
                          "let the --replace-op before it drop the attributes the new operator does not take"),
}


#: flag → (metavar, builder, help). Order here is the order --help lists them.
OPTIONS: dict[str, tuple[str | None, Callable[[Any], Step], str]] = {
    "--set-attr": ("NODE.NAME=VALUE", _set_attr, "set an attribute; VALUE is JSON (1, 0.5, [1,1], \"s\") or FILE.npy"),
    "--remove-attr": ("NODE.NAME", _remove_attr, "remove an attribute"),
    "--set-op-type": ("NODE=[DOMAIN::]OP", _set_op_type, "change a node's operator (and domain)"),
    "--rename": ("OLD=NEW", _renamed("rename_tensor", "--rename"), "rename a tensor everywhere (subgraphs too)"),
    "--rename-node": ("OLD=NEW", _renamed("rename_node", "--rename-node"), "rename a node"),
    "--rename-pattern": ("REGEX=REPLACEMENT", _rename_pattern,
                         "rename every tensor and node matching a Python regular expression (split at the last "
                         "'='; \\1 refers to a group), consistently in every graph; --scope after it limits it"),
    "--prefix": ("P", lambda t: Step("rename_pattern", {"prefix": t}), "put P before every tensor and node name"),
    "--bypass": ("NODE[=INPUT]", _bypass, "remove a node; its readers read its input #INPUT (default 0)"),
    "--remove-node": ("NODE", lambda t: Step("remove_node", {"node": t}),
                      "remove an unused node and what only it fed"),
    "--remove-node-downstream": ("NODE", lambda t: Step("remove_node", {"node": t, "downstream": True}),
                                 "remove a node, everything computed from it, and what only it fed"),
    "--insert-after": ("TENSOR=[DOMAIN::]OP", _insert_after,
                       "insert a node reading TENSOR; its readers read the node's output (a graph output keeps its "
                       "name); --operand and --attr after it give further inputs and attributes"),
    "--set-initializer": ("NAME=VALUE", _with_value("set_initializer", "--set-initializer"),
                          "replace an initializer's (or Constant's) value: FILE.npy or JSON"),
    "--input-from-initializer": ("NAME[=NEW]", _to_input("initializer_to_input", "--input-from-initializer"),
                                 "turn an initializer into a graph input (optionally renamed)"),
    "--input-from-constant": ("NAME[=NEW]", _to_input("constant_to_input", "--input-from-constant"),
                              "turn a Constant node's output into a graph input (optionally renamed)"),
    "--freeze": ("NAME=VALUE", _with_value("input_to_initializer", "--freeze"),
                 "turn a graph input into an initializer holding VALUE (FILE.npy or JSON)"),
    "--dynamic": ("TENSOR:AXIS=NAME", lambda t: _dims(t, "--dynamic", False),
                  "make a dim of a graph input/output dynamic (NAME, or ? for unnamed)"),
    "--fixed": ("TENSOR:AXIS=SIZE", lambda t: _dims(t, "--fixed", True), "fix a dim of a graph input/output"),
    "--fixed-dim": ("NAME=SIZE", lambda t: _replace_dim(t, "--fixed-dim"),
                    "fix a named dim on every graph input and output that carries it"),
    "--dynamic-dim": ("SIZE_OR_NAME[@AXIS]=NAME", lambda t: _replace_dim(t, "--dynamic-dim"),
                      "name a dim (of that size, at AXIS if given, or of that name) on every graph input "
                      "and output"),
    "--replace-op": ("[DOMAIN::]OP=[DOMAIN::]NEW", _replace_op,
                     "replace every node of an operator, keeping the attributes NEW accepts at the model's opset "
                     "(others are refused unless --drop-attributes follows), e.g. com.example::MyGelu=Gelu"),
    "--set-dtype": ("NAME=DTYPE", _set_dtype,
                    "change a graph input's or output's dtype, with a Cast inside (e.g. input=uint8, logits=float16)"),
    "--set-opset": ("DOMAIN=VERSION", _set_opset, "set or add an opset import (ai.onnx for the default domain)"),
    "--remove-opset": ("DOMAIN", lambda t: Step("set_opset", {"domain": t, "version": None}),
                       "remove an opset import no node uses"),
    "--replace-span": ("INPUTS:OUTPUTS=MODEL.onnx", _replace_span,
                       "replace the nodes computing OUTPUTS from INPUTS (what extract would cut) by MODEL's graph, "
                       "its inputs and outputs bound by position, or by SPAN=MODEL name pairs; names are comma-"
                       "separated, and \\: \\, \\= write a ':' ',' '=' inside a name"),
    "--add-output": ("TENSOR", lambda t: Step("add_output", {"tensor": t}), "make a tensor a graph output (typed)"),
    "--remove-output": ("TENSOR", lambda t: Step("remove_output", {"tensor": t}),
                        "remove a graph output and the nodes only it needed"),
    "--cleanup": (None, lambda _t: Step("cleanup", {}),
                  "remove unused nodes, initializers, inputs, value_info, functions and opset imports"),
    "--fold-constants": ("MAX_BYTES", _fold, "replace constant-only computations by initializers "
                                             "(through ONNX Runtime), each at most MAX_BYTES (default 1 MiB); "
                                             "in every graph, Constant nodes and static shapes included"),
    "--constants-to-initializers": (None, lambda _t: Step("constants_to_initializers", {}),
                                    "turn Constant nodes into initializers"),
    "--remove-identities": (None, lambda _t: Step("remove_identities", {}),
                            "remove Identity and inference Dropout nodes (readers read their input)"),
    "--fold-shapes": (None, lambda _t: Step("fold_shapes", {}),
                      "replace Shape/Size of static dims by constants and give Reshapes constant targets"),
    "--merge-constants": (None, lambda _t: Step("merge_constants", {}), "merge initializers holding equal values"),
    "--fuse-gemm": (None, lambda _t: Step("fuse_gemm", {}),
                    "turn MatMul (2-D input, 2-D constant weight) + Add of a constant bias into one Gemm"),
    "--inline-branches": (None, lambda _t: Step("inline_branches", {}),
                          "replace an If whose condition is a constant by the branch it takes"),
    "--fuse-conv": (None, lambda _t: Step("fuse_conv", {}),
                    "fold an inference BatchNormalization, or a Mul/Add by a per-channel constant, after a Conv "
                    "into its weights; two Transposes in a row become one"),
    "--merge-nodes": (None, lambda _t: Step("merge_nodes", {}),
                      "compute nodes with the same op, attributes and inputs once"),
    "--fuse-attention": (None, lambda _t: Step("fuse_attention", {}),
                         "fuse multi-head attention into ONNX Runtime's com.microsoft::Attention (the result runs in "
                         "ONNX Runtime only)"),
    "--fuse-gelu": (None, lambda _t: Step("fuse_gelu", {}),
                    "fuse x*0.5*(1+erf(x/sqrt(2))) into ONNX Runtime's com.microsoft::Gelu or BiasGelu, its tanh "
                    "approximation into FastGelu (the result runs in ONNX Runtime only)"),
    "--fuse-skip-layernorm": (None, lambda _t: Step("fuse_skip_layernorm", {}),
                              "fuse Add + LayerNormalization into ONNX Runtime's com.microsoft::SkipLayerNormalization "
                              "(the result runs in ONNX Runtime only)"),
    "--simplify": (None, lambda _t: Step("simplify", {}), "every pass of 'graphkit simplify' (without its verification)"),
}


class _StepAction(argparse.Action):
    """Append the option's step to ``namespace.steps``, keeping command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        steps = list(getattr(namespace, "steps", None) or [])
        steps.append((option_string, values))
        namespace.steps = steps


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("edit", help="edit a model: attributes, ops, renames, shapes, inputs, cleanup, folding",
                       description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="the .onnx file to edit (never modified)")
    p.add_argument("output", help="where to write the edited model")
    group = p.add_argument_group("edits (applied in command-line order)")
    group.add_argument("--recipe", metavar="FILE", action=_StepAction, dest="steps",
                       help="apply the steps of a JSON or YAML recipe")
    for flag, (metavar, _, text) in OPTIONS.items():
        if metavar is None:
            group.add_argument(flag, nargs=0, action=_StepAction, dest="steps", help=text)
        elif flag == "--fold-constants":
            group.add_argument(flag, nargs="?", metavar=metavar, action=_StepAction, dest="steps", help=text)
        else:
            group.add_argument(flag, metavar=metavar, action=_StepAction, dest="steps", help=text)
    for flag, (metavar, _, _, text) in MODIFIERS.items():
        if metavar:
            group.add_argument(flag, metavar=metavar, action=_StepAction, dest="steps", help=text)
        else:
            group.add_argument(flag, nargs=0, action=_StepAction, dest="steps", help=text)
    p.add_argument("--save-recipe", metavar="FILE", help="also write the steps applied as a recipe (.json/.yaml)")
    p.add_argument("--allow-noop", action="store_true", help="accept edits that change nothing")
    p.add_argument("--json", action="store_true", help="print a JSON summary of what changed")
    _render.add_progress_option(p)
    _common.add_output_options(p)
    p.set_defaults(func=run, steps=[])


def collect_steps(raw: list[tuple[str, Any]]) -> list[Step]:
    """Steps from the options given, in order; a recipe's paths become absolute."""
    steps: list[Step] = []
    for flag, value in raw:
        if flag == "--recipe":
            recipe = load_recipe(value)
            steps.extend(_absolute(s, recipe.base_dir) for s in recipe.steps)
        elif flag in MODIFIERS:
            _, ops, change, _ = MODIFIERS[flag]
            if not steps or steps[-1].op not in ops:
                owner = {"insert_node": "--insert-after", "rename_pattern": "--rename-pattern or --prefix",
                         "replace_op": "--replace-op", "set_initializer": "--set-initializer",
                         "simplify": "--simplify"}[ops[0]]
                shown = f"{flag} {value!r}" if value != [] else flag
                raise UsageError(f"{shown} must follow {owner}",
                                 hint=f"write it right after the option it belongs to, e.g. {_MODIFIER_EXAMPLE[flag]}")
            steps[-1] = change(steps[-1], value)
        else:
            builder = OPTIONS[flag][1]
            steps.append(builder(None if value == [] else value))
    return steps


_MODIFIER_EXAMPLE = {
    "--operand": "--insert-after input=Sub --operand mean.npy",
    "--attr": "--insert-after output=Cast --attr to=float16",
    "--scope": "--rename-pattern '/=_' --scope tensors",
    "--target": "--simplify --target onnxruntime",
    "--drop-attributes": "--replace-op my::Debug=Identity --drop-attributes",
    "--allow-reshape": "--set-initializer conv1.bias=bias.npy --allow-reshape",
}


def _absolute(step: Step, base: Path) -> Step:
    return _map_paths(step, lambda path: str((base / path).resolve()))


def _relative(step: Step, folder: Path) -> Step:
    return _map_paths(step, lambda path: os.path.relpath(path, folder))


def _map_paths(step: Step, convert: Callable[[str], str]) -> Step:
    """The step with every file path in it (``{"npy": …}`` values, a merged or spliced model) converted."""

    def fix(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"npy"} and isinstance(value["npy"], str):
            return {"npy": convert(value["npy"])}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    args = {k: fix(v) for k, v in step.args.items()}
    key = MODEL_ARGS.get(step.op)
    if key is not None and isinstance(args.get(key), str):
        args[key] = convert(args[key])
    return Step(step.op, args)


@contextmanager
def _captured_warnings() -> Iterator[list[str]]:
    found: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(record.getMessage())

    handler = _Collect(logging.WARNING)
    logger = logging.getLogger("graphkit")
    logger.addHandler(handler)
    try:
        yield found
    finally:
        logger.removeHandler(handler)


def _names(values: Any) -> list[str]:
    return [v.name for v in values]


def summary(before: Model, after: Model) -> dict[str, Any]:
    """What changed between two models, by name."""
    def diff(a: list[str], b: list[str]) -> dict[str, list[str]]:
        return {"added": [n for n in b if n not in a], "removed": [n for n in a if n not in b]}

    return {
        "nodes": {"before": len(before.lazy_proto.graph.node), "after": len(after.lazy_proto.graph.node)},
        "initializers": {"before": len(before.lazy_proto.graph.initializer), "after": len(after.lazy_proto.graph.initializer)},
        "inputs": diff(_names(before.lazy_proto.graph.input), _names(after.lazy_proto.graph.input)),
        "outputs": diff(_names(before.lazy_proto.graph.output), _names(after.lazy_proto.graph.output)),
        "opsets": {o.domain or "ai.onnx": o.version for o in after.lazy_proto.opset_import},
    }


def _plan(args: argparse.Namespace, model: Model, steps: list[Step]) -> io.WritePlan:
    """What the edit reads (the model, recipes, .npy values, merged models) and writes."""
    others = [str(s.args[MODEL_ARGS[s.op]]) for s in steps if MODEL_ARGS.get(s.op) in s.args]
    plan = _common.plan(args, model, *(load_merged(path) for path in others), output=args.output, reads=[
        *((value, "the recipe") for flag, value in args.steps if flag == "--recipe"),
        *((path, "a merged or spliced model") for path in others),
        *((path, "a tensor file") for step in steps for path in _npy_files(step.args))])
    if args.save_recipe:
        plan.write(args.save_recipe, "the recipe")
    return plan


def _npy_files(value: Any) -> Iterator[str]:
    """The ``{"npy": FILE}`` paths in a step's arguments."""
    if isinstance(value, dict) and set(value) == {"npy"}:
        yield str(value["npy"])
    elif isinstance(value, dict):
        for item in value.values():
            yield from _npy_files(item)
    elif isinstance(value, list):
        for item in value:
            yield from _npy_files(item)


def load_merged(path: str) -> Model | None:
    """A model a merge step reads, for the write plan (None: unreadable; the step will say why)."""
    try:
        return _common.load(path)
    except GraphkitError:
        return None


def _bar(step: Step, enabled: bool | None) -> Progress | None:
    """A progress bar for one step (fold_constants, simplify: one tick per pass); the previous step's closes."""
    _render.progress_done()
    return _render.progress(f"edit: {step.op}", enabled=enabled, unit="passes")


def run(args: argparse.Namespace) -> int:
    steps = collect_steps(args.steps)
    if not steps:
        raise UsageError("no edit given", hint="give edit options (see 'python -m graphkit edit --help') or --recipe")
    model = _common.load(args.input)
    plan = _plan(args, model, steps)
    plan.check()
    with _captured_warnings() as warnings:
        result, done = run_steps(model, steps, allow_noop=args.allow_noop, check=False,
                                 progress=lambda step: _bar(step, args.progress))
        _render.progress_done()
    with plan.output(args.save_recipe, "the recipe") if args.save_recipe else contextlib.nullcontext() as tmp:
        if tmp is not None:  # (written first, put in place after the model: both or neither)
            folder = Path(args.save_recipe).resolve().parent
            tmp.write_text(dump_recipe([_relative(s, folder) for s in steps], args.save_recipe), encoding="utf-8")
        _common.write_model(result, args.output, args, plan)
    shapes = changed_outputs(model, result)
    report = {"input": args.input, "output": args.output, "steps": [d.to_dict() for d in done],
              **summary(model, result), "shapes": [c.to_dict() for c in shapes], "warnings": warnings}
    if args.json:
        _render.json_out(report)
        return 0
    for step in done:
        _render.text(f"{'applied' if step.changed else 'no change'}: {step.op} "
                     + " ".join(f"{k}={v}" for k, v in step.args.items())
                     + (f"\n  note: {step.note}" if step.note else ""))
    for change in shapes:
        _render.text(change_text(change))
    _render.text(f"wrote {args.output}: {report['nodes']['before']} -> {report['nodes']['after']} nodes"
                 + (f", recipe in {args.save_recipe}" if args.save_recipe else ""))
    return 0
