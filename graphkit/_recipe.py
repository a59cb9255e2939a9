"""Recipes: a list of edits in a JSON or YAML file, applied in order, reviewable and replayable.

    - op: set_op_type          # a function of graphkit._edit (or a pass of graphkit._simplify)
      node: Add                # its keyword arguments
      op_type: Sub
    - op: set_initializer
      tensor: conv1.bias
      value: {npy: bias.npy}   # tensors: {npy: FILE} (relative to the recipe) or {value: [...], dtype: float32}
    - op: set_dims
      tensor: input
      dims: {0: batch}

A file holds either that list or ``{"steps": [...]}``. Every step is checked (known operation, known
arguments, readable values) before the first edit is applied; then each step runs through the same
function the Python API offers, so a recipe gives exactly what the same calls give one by one.
"""

from __future__ import annotations

import collections.abc
import inspect
import json
import os
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphkit import _check_args as argcheck
from graphkit import _edit as edit
from graphkit import _simplify
from graphkit._arrays import read_npy
from graphkit._convert import set_dtype, to_float16
from graphkit._edit.renames import renamer
from graphkit._files import read_data
from graphkit._graph import graph_tensor_names
from graphkit._io import atomic_output, load
from graphkit._model import Model, iter_graphs
from graphkit._numbers import check_int, parse_int
from graphkit._progress import Progress
from graphkit.errors import (
    NoChangeError,
    NodeNotFoundError,
    TensorNotFoundError,
    UsageError,
    did_you_mean,
    not_found,
)

__all__ = ["OPERATIONS", "Recipe", "Step", "StepResult", "apply_recipe", "dump_recipe", "load_recipe", "run_steps", "save_recipe"]

#: Recipe operation name → edit function (merge's ``other`` and replace_span's ``replacement`` are model paths).
OPERATIONS: dict[str, Callable[..., Model]] = {
    name: getattr(edit, name)
    for name in (
        "set_attribute", "remove_attribute", "set_op_type", "rename_tensor", "rename_node", "bypass_node",
        "remove_node", "insert_node", "set_initializer", "initializer_to_input", "constant_to_input",
        "input_to_initializer", "set_dims", "replace_dim", "replace_op", "set_opset", "cleanup", "merge",
        "rename_pattern", "replace_span", "add_output", "remove_output",
    )
} | {
    name: getattr(_simplify, name)
    for name in ("fold_constants", "constants_to_initializers", "remove_identities", "fold_shapes", "merge_constants",
                 "fuse_gemm", "inline_branches", "fuse_conv", "merge_nodes", "simplify", "fuse_attention", "fuse_gelu",
                 "fuse_skip_layernorm")
} | {"to_float16": to_float16, "set_dtype": set_dtype}
#: Operations without a ``check`` keyword (their result is validated with the whole recipe's).
_UNCHECKED = frozenset({"to_float16", "set_dtype"})
#: Operations that take ``progress=`` (a recipe cannot give one: the CLI passes its bar).
_REPORTS_PROGRESS = frozenset(
    name for name, function in OPERATIONS.items()
    if "progress" in inspect.signature(getattr(function, "__wrapped__", function)).parameters)
#: Arguments that name another model, a path in a recipe (relative to the recipe), loaded when the step runs.
MODEL_ARGS: dict[str, str] = {"merge": "other", "replace_span": "replacement"}
#: Argument names of earlier releases → today's keyword, per operation: recipe files written with
#: the old names keep working (the step is read with today's names).
RENAMED_ARGS: dict[str, dict[str, str]] = {
    "set_attribute": {"name": "attribute"},
    "remove_attribute": {"name": "attribute"},
    "set_initializer": {"name": "tensor"},
    "initializer_to_input": {"name": "tensor"},
    "constant_to_input": {"name": "tensor"},
    "input_to_initializer": {"name": "tensor"},
}
#: Arguments whose values may be tensors ({npy: …} or {value: …, dtype: …}).
_TENSOR_ARGS = {"value", "inputs", "attributes"}


@dataclass(frozen=True)
class Step:
    """One edit: the operation's name and its keyword arguments (as written in the recipe)."""

    op: str
    args: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The step as a recipe entry."""
        return {"op": self.op, **self.args}


@dataclass(frozen=True)
class Recipe:
    """Steps and the folder their relative paths (``npy`` files, merged models) are read from."""

    steps: tuple[Step, ...]
    base_dir: Path = Path(".")

    def to_list(self) -> list[dict[str, Any]]:
        """The recipe as data (for JSON or YAML)."""
        return [s.to_dict() for s in self.steps]


@dataclass(frozen=True)
class StepResult:
    """What one applied step did.

    Attributes:
        op: The operation.
        args: Its arguments, as written.
        changed: Whether it changed the model.
        note: Why it changed nothing (empty when it changed something).
    """

    op: str
    args: dict[str, Any]
    changed: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"op": self.op, "args": self.args, "changed": self.changed, "note": self.note}


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read a recipe file (``.json``, or ``.yaml``/``.yml``) and check its steps' form.

    Raises:
        UsageError: The file is missing or unreadable, or a step is malformed or unknown.
    """
    argcheck.path(path, "path")
    file = Path(path)
    data = read_data(file, what="recipe")
    return Recipe(tuple(parse_steps(data, source=str(file))), file.resolve().parent)


def parse_steps(data: Any, *, source: str = "the recipe") -> list[Step]:
    """Steps from recipe data (a list of ``{"op": …}`` or ``{"steps": [...]}``), each checked.

    Raises:
        UsageError: naming the step's position and what is wrong.
    """
    if isinstance(data, Mapping) and "steps" in data:
        data = data["steps"]
    if not isinstance(data, list):
        raise UsageError(f"{source} must be a list of steps", hint='e.g. [{"op": "cleanup"}]')
    steps = []
    for i, entry in enumerate(data, 1):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("op"), str):
            raise UsageError(f"step {i} of {source} has no 'op'", hint='each step looks like {"op": "cleanup", ...}')
        renamed = RENAMED_ARGS.get(entry["op"], {})
        step = Step(entry["op"], {renamed.get(str(k), str(k)): v for k, v in entry.items() if k != "op"})
        _check_step(step, i, source)
        steps.append(step)
    return steps


def _check_step(step: Step, position: int, source: str) -> None:
    where = f"step {position} of {source}"
    if step.op not in OPERATIONS:
        hint = did_you_mean(step.op, OPERATIONS) or "known operations: " + ", ".join(OPERATIONS)
        raise UsageError(f"{where}: unknown operation {step.op!r}", hint=hint)
    params = inspect.signature(OPERATIONS[step.op]).parameters
    names = [p for p in params if p not in ("model", "a", "b", "check")] + (["other"] if step.op == "merge" else [])
    for key in step.args:
        if key not in names:
            raise UsageError(f"{where} ({step.op}): unknown argument {key!r}",
                             hint=did_you_mean(key, names) or f"{step.op} takes " + ", ".join(names))
    if step.op == "merge" and "other" not in step.args:
        raise UsageError(f"{where} (merge): needs 'other', the model to merge with", hint='e.g. "other": "b.onnx"')
    required = [p.name for p in params.values() if p.default is inspect.Parameter.empty
                and p.name not in ("model", "a", "b") and p.kind != inspect.Parameter.VAR_KEYWORD]
    missing = [r for r in required if r not in step.args]
    if missing:
        raise UsageError(f"{where} ({step.op}): missing argument(s) {', '.join(missing)}",
                         hint=f"{step.op} needs " + ", ".join(required))


def decode_value(value: Any, base_dir: Path) -> Any:
    """Turn ``{npy: FILE}`` and ``{value: …, dtype: …}`` into numpy arrays; anything else is returned as is.

    Raises:
        UsageError: The .npy file cannot be read (not a regular file, too large, truncated, object
            arrays), or the dtype is unknown or not numeric.
    """
    if isinstance(value, Mapping) and set(value) == {"npy"}:
        if not isinstance(value["npy"], str):
            raise UsageError(f"{{npy: {value['npy']!r}}}: the file name must be a string", hint="e.g. {npy: bias.npy}")
        return read_npy(base_dir / value["npy"], what="tensor file", error=UsageError)
    if isinstance(value, Mapping) and set(value) == {"value", "dtype"}:
        return _literal_tensor(value["value"], value["dtype"])
    if isinstance(value, list):
        return [decode_value(v, base_dir) for v in value]
    if isinstance(value, Mapping):
        return {k: decode_value(v, base_dir) for k, v in value.items()}
    return value


def _literal_tensor(data: Any, dtype_name: Any) -> np.ndarray:
    hint = "use a numeric numpy dtype name such as float32 or int64, and a number or nested list of numbers"
    try:
        dtype = np.dtype(str(dtype_name))
    except TypeError as err:
        raise UsageError(f"unknown dtype {dtype_name!r}", hint=hint) from err
    if dtype.kind not in _TENSOR_KINDS or dtype.hasobject:
        raise UsageError(f"dtype {dtype_name!r} is not a tensor dtype", hint=hint)
    _check_plain(data, "value", hint)
    try:
        return np.asarray(data, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as err:
        raise UsageError(f"cannot make a {dtype_name} tensor of {_short(data)}: {err}", hint=hint) from err


def _check_plain(data: Any, what: str, hint: str) -> None:
    """Refuse values a tensor cannot hold (objects, mappings) before numpy is asked."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif not isinstance(item, (bool, int, float, str)):
            raise UsageError(f"{what} {_short(data)} holds {type(item).__name__} {_short(item)}", hint=hint)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------- argument types


def _expected(op: str) -> dict[str, Any]:
    """Each argument's declared type, from the edit function's annotations (merge's ``other`` is a path)."""
    hints = typing.get_type_hints(OPERATIONS[op])
    expected = {k: v for k, v in hints.items() if k not in ("model", "a", "b", "check", "return")}
    if op in MODEL_ARGS:
        expected[MODEL_ARGS[op]] = str
    return expected


def _matches(value: Any, hint: Any) -> bool:
    """Whether a decoded recipe value fits a declared type (the forms the edit functions use)."""
    if hint is Any:
        return _plain_data(value)
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is np.ndarray:
        return isinstance(value, np.ndarray)
    if origin is tuple:
        return (isinstance(value, (list, tuple)) and len(value) == len(args)
                and all(_matches(v, a) for v, a in zip(value, args)))
    if origin in (Sequence, list, collections.abc.Sequence):
        return isinstance(value, (list, tuple)) and all(_matches(v, args[0]) for v in value)
    if origin in (Mapping, dict, collections.abc.Mapping):
        return isinstance(value, Mapping) and all(_matches(k, args[0]) and _matches(v, args[1])
                                                  for k, v in value.items())
    return isinstance(hint, type) and isinstance(value, hint)


def _plain_data(value: Any) -> bool:
    """JSON-like data (and arrays): what a recipe's free-form values may hold."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Mapping):
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend(item.values())
        elif isinstance(item, int) and not isinstance(item, bool):
            if not -(2**63) <= item < 2**63:
                return False
        elif not (item is None or isinstance(item, (bool, float, str, np.ndarray))):
            return False
    return True


def _not_utf8(value: Any) -> str | None:
    """The first string in ``value`` that UTF-8 cannot encode (a lone surrogate, as undecodable command-line
    bytes or a JSON ``\\udcff`` escape give), or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
    return None


def _describe(hint: Any, *, plural: bool = False) -> str:
    """A declared type in words: ``a string or null``, ``a list of (strings or tensors)``."""
    if hint is Any:
        return "values" if plural else "a number, string, list, tensor or mapping of them"
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = list(dict.fromkeys(_describe(a, plural=plural) for a in args))
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return ("lists" if plural else "a list") + f" of {len(args)} " + _inner(args[0])
    if origin in (Sequence, list, collections.abc.Sequence):
        return ("lists" if plural else "a list") + " of " + _inner(args[0])
    if origin in (Mapping, dict, collections.abc.Mapping):
        return ("mappings" if plural else "a mapping") + f" of {_inner(args[0])} to {_inner(args[1])}"
    words = _WORDS.get(hint) or _WORDS.get(type(hint)) or (getattr(hint, "__name__", str(hint)),) * 2
    return words[1] if plural else words[0]


def _inner(hint: Any) -> str:
    text = _describe(hint, plural=True)
    return f"({text})" if " or " in text else text


_WORDS: dict[Any, tuple[str, str]] = {
    bool: ("true or false", "booleans"), int: ("a whole number", "whole numbers"), float: ("a number", "numbers"),
    str: ("a string", "strings"), np.ndarray: ("a tensor", "tensors"), type(None): ("null", "nulls"),
}
#: dtype kinds a tensor value may have: bool, ints, floats, complex, strings.
_TENSOR_KINDS = set("biufcUS")


def _check_types(step: Step, args: Mapping[str, Any], where: str) -> None:
    """Raise UsageError naming the first argument whose decoded value does not fit its declared type."""
    expected = _expected(step.op)
    for key, value in args.items():
        text = _not_utf8(value)
        if text is not None:
            raise UsageError(f"{where} ({step.op}): argument {key!r} holds {_short(text)}, which is not valid UTF-8 text",
                             hint="names in an ONNX model are UTF-8; check the bytes given (a terminal's encoding)")
        hint = expected.get(key)
        if hint is not None and not _matches(value, hint):
            raise UsageError(f"{where} ({step.op}): argument {key!r} must be {_describe(hint)}, not {_short(value)}",
                             hint=f"fix {key!r} in the step; {step.op} takes "
                                  + ", ".join(f"{k} ({_describe(v)})" for k, v in expected.items()))


def _call_args(step: Step, base_dir: Path, where: str = "step") -> dict[str, Any]:
    args = {}
    for key, value in step.args.items():
        try:
            args[key] = decode_value(value, base_dir) if key in _TENSOR_ARGS else value
        except UsageError as err:
            raise UsageError(f"{where} ({step.op}): argument {key!r}: {err.message}", hint=err.hint,
                             cli_hint=err.cli_hint) from err
    if step.op == "set_dims" and isinstance(args.get("dims"), Mapping):
        args["dims"] = {_axis(k, where): v for k, v in args["dims"].items()}
    if step.op == "merge" and isinstance(args.get("prefixes"), list):
        args["prefixes"] = tuple(args["prefixes"])
    _check_types(step, args, where)
    if step.op in MODEL_ARGS:
        key = MODEL_ARGS[step.op]
        args[key] = load(base_dir / args[key])
    return args


def _axis(key: Any, where: str) -> int:
    hint = "dims maps axes (whole numbers, e.g. 0 or -1) to sizes, names or null"
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise UsageError(f"{where} (set_dims): axis {key!r} in 'dims' is not a whole number", hint=hint)
    if isinstance(key, int):
        return check_int(key, what=f"{where} (set_dims): axis", lo=-_MAX_RANK, hi=_MAX_RANK - 1, hint=hint)
    return parse_int(key, what=f"{where} (set_dims): axis", lo=-_MAX_RANK, hi=_MAX_RANK - 1, hint=hint)


#: No tensor has more dims than this (ONNX Runtime's limit is far lower); axes beyond it are typos.
_MAX_RANK = 1 << 16


def run_steps(model: Model, steps: Sequence[Step], *, base_dir: str | os.PathLike[str] = ".",
              allow_noop: bool = False, check: bool = True,
              progress: Callable[[Step], Progress | None] | None = None) -> tuple[Model, list[StepResult]]:
    """Apply steps in order; return the result and what each step did.

    ``progress(step)``, when given, is asked for the ``progress=`` callback of each step whose
    operation reports progress (``fold_constants``, ``simplify``), just before that step runs.

    Every step's arguments (and .npy files, and the models a step reads) are read, and every name a
    step refers to is looked up (in the model as the earlier steps leave it), before the first edit
    is applied: a mistyped name in step 5 is reported before steps 1 to 4 run. A step that changes
    nothing is a note in its result; only an edit where no step changes anything is refused.

    Raises:
        UsageError: A step is malformed.
        NameNotFoundError: A step names a tensor or node that will not exist when it runs.
        NoChangeError: No step changed anything (unless ``allow_noop``).
        GraphkitError: Whatever the step's edit raises, with the step's position added to the message.
    """
    folder = Path(base_dir)
    for i, step in enumerate(steps, 1):
        _check_step(step, i, "the recipe")
    prepared = [_call_args(step, folder, f"step {i}") for i, step in enumerate(steps, 1)]
    check_step_names(model, steps, prepared)
    results: list[StepResult] = []
    refused: list[NoChangeError] = []
    current = model
    for i, (step, args) in enumerate(zip(steps, prepared), 1):
        try:
            call = dict(args)
            if progress is not None and step.op in _REPORTS_PROGRESS:
                call["progress"] = progress(step)
            current = _apply(current, step.op, call, check=check)
            results.append(StepResult(step.op, step.args, True))
        except NoChangeError as err:
            if len(steps) > 1:
                err.message = f"step {i} ({step.op}): {err.message}"
                err.args = (err.message,)
            refused.append(err)
            results.append(StepResult(step.op, step.args, False, err.message))
        except Exception as err:
            if hasattr(err, "message") and len(steps) > 1:
                err.message = f"step {i} ({step.op}): {err.message}"
                err.args = (err.message,)
            raise
    if len(refused) == len(steps) and steps and not allow_noop:
        if len(refused) == 1:
            raise refused[0]
        raise NoChangeError(f"none of the {len(steps)} steps changes anything: "
                            + "; ".join(e.message for e in refused[:3]) + (" …" if len(refused) > 3 else ""),
                            hint="drop these edits (allow_noop=True accepts them)",
                            cli_hint="drop these edits, or pass --allow-noop to accept edits that change nothing")
    return current, results


#: Per operation, the arguments naming an existing node or tensor: (argument, "node" | "tensor").
_NAMED: dict[str, tuple[tuple[str, str], ...]] = {
    "set_attribute": (("node", "node"),), "remove_attribute": (("node", "node"),),
    "set_op_type": (("node", "node"),), "bypass_node": (("node", "node"),), "remove_node": (("node", "node"),),
    "rename_node": (("old", "node"),), "rename_tensor": (("old", "tensor"),),
    "insert_node": (("after", "tensor"), ("inputs", "tensor")),
    "set_initializer": (("tensor", "tensor"),), "initializer_to_input": (("tensor", "tensor"),),
    "constant_to_input": (("tensor", "tensor"),), "input_to_initializer": (("tensor", "tensor"),),
    "set_dims": (("tensor", "tensor"),), "replace_span": (("inputs", "tensor"), ("outputs", "tensor")),
    "add_output": (("tensor", "tensor"),), "remove_output": (("tensor", "tensor"),),
}
_POSITIONAL = re.compile(r"^(#\d+|[^#]+#\d+)$")


class _Names:
    """The tensor and node names a model will have when a step runs, step by step (a superset: a
    name is never taken away, so a check can only miss a mistake, never refuse a valid step)."""

    def __init__(self, model: Model) -> None:
        proto = model.lazy_proto
        self.tensors = set(graph_tensor_names(proto.graph))
        self.nodes = {n.name for g, _ in iter_graphs(proto.graph) for n in g.node if n.name}
        self.functions = {f.name: {n.name for n in f.node if n.name} for f in proto.functions}
        self.function_tensors = {f.name: {*f.input, *f.output, *(o for n in f.node for o in n.output)}
                                 for f in proto.functions}

    def has_tensor(self, name: str) -> bool:
        if name in self.tensors:
            return True
        function, sep, inner = name.partition("/")
        return bool(sep) and inner in self.function_tensors.get(function, ())

    def tensor_pool(self) -> list[str]:
        """Every tensor name, a function's as FUNCTION/TENSOR (for did-you-mean)."""
        inside = [f"{f}/{t}" for f, names in self.function_tensors.items() for t in names if t]
        return [*sorted(self.tensors), *sorted(inside)]

    def has_node(self, name: str) -> bool:
        if name in self.nodes or _POSITIONAL.match(name):
            return True
        function, sep, inner = name.partition("/")
        return bool(sep) and function in self.functions and (inner in self.functions[function]
                                                              or bool(_POSITIONAL.match(inner)))

    def after(self, op: str, args: Mapping[str, Any]) -> None:
        """Add the names step ``op`` may create."""
        if op in ("rename_tensor", "constant_to_input", "initializer_to_input") and args.get(
                "new" if op == "rename_tensor" else "input_name"):
            new = str(args["new" if op == "rename_tensor" else "input_name"])
            function, sep, _ = str(args.get("old", "")).partition("/")
            self.tensors.add(new)
            if op == "rename_tensor" and sep and function in self.function_tensors:
                self.tensors.add(f"{function}/{new.removeprefix(function + '/')}")
        elif op == "rename_node":
            self.nodes.add(str(args["new"]))
        elif op == "insert_node":
            stem = f"{args['after']}/{args['op_type']}"
            self.tensors.add(str(args.get("output") or f"{stem}_output"))
            self.nodes.add(str(args.get("name") or stem))
        elif op == "rename_pattern":
            self._renamed(args)
        elif op in MODEL_ARGS:
            self._other(op, args)

    def _renamed(self, args: Mapping[str, Any]) -> None:
        try:
            rename = renamer(str(args.get("pattern", "")), str(args.get("replacement", "")),
                                      str(args.get("prefix", "")))
            scope = args.get("scope", "all")
            if scope in ("tensors", "all"):
                self.tensors |= {rename(n) for n in self.tensors}
            if scope in ("nodes", "all"):
                self.nodes |= {rename(n) for n in self.nodes}
        except UsageError:
            pass  # (the step itself reports a bad pattern when it runs)

    def _other(self, op: str, args: Mapping[str, Any]) -> None:
        other = args[MODEL_ARGS[op]]
        if not isinstance(other, Model):
            return
        tensors = set(graph_tensor_names(other.lazy_proto.graph))
        nodes = {n.name for g, _ in iter_graphs(other.lazy_proto.graph) for n in g.node if n.name}
        prefixes = [*(args.get("prefixes") or ()), f"{other.lazy_proto.graph.name or 'replacement'}/", ""]
        for prefix in prefixes:
            self.tensors |= {prefix + n for n in tensors}
            self.nodes |= {prefix + n for n in nodes}
        if op == "merge" and args.get("prefixes"):
            first = args["prefixes"][0]
            self.tensors |= {first + n for n in self.tensors}
            self.nodes |= {first + n for n in self.nodes}


def check_step_names(model: Model, steps: Sequence[Step], prepared: Sequence[Mapping[str, Any]]) -> None:
    """Look up every tensor and node a step names, in the model as the earlier steps will leave it,
    before any step runs.

    Raises:
        NodeNotFoundError, TensorNotFoundError: naming the step, with did-you-mean.
    """
    names = _Names(model)
    for i, (step, args) in enumerate(zip(steps, prepared), 1):
        for key, kind in _NAMED.get(step.op, ()):
            value = args.get(key)
            wanted = [value] if isinstance(value, str) else [v for v in (value or []) if isinstance(v, str)]
            for name in wanted:
                if not name:
                    continue
                known = names.has_node(name) if kind == "node" else names.has_tensor(name)
                if not known:
                    pool = names.nodes if kind == "node" else names.tensor_pool()
                    error = not_found(NodeNotFoundError if kind == "node" else TensorNotFoundError, kind, name,
                                      sorted(pool), where=model.name)
                    raise type(error)(f"step {i} ({step.op}): {error.message} (checked before any step ran)",
                                      hint=error.hint, cli_hint=error.cli_hint)
        names.after(step.op, args)


def _apply(model: Model, op: str, args: dict[str, Any], *, check: bool) -> Model:
    """Run one step (the raising form of its edit: NoChangeError says why a step changed nothing)."""
    if op == "merge":
        other = args.pop("other")
        return edit.merge(model, other, check=check, **args)
    public = OPERATIONS[op]
    raising = getattr(public, "__wrapped__", public)  # (raises NoChangeError saying why a step changed nothing)
    if op in _UNCHECKED:
        return raising(model, **args)
    return raising(model, check=check, **args)


def apply_recipe(model: Model, recipe: Recipe | str | os.PathLike[str] | Sequence[Mapping[str, Any]], *,
                 check: bool = True) -> Model:
    """Apply a recipe (a file path, a Recipe, or a list of step dicts) to a model; return the result.

    A step that changes nothing is skipped, as the edit function would return its input; when no
    step changes anything, the result is ``model`` itself.

    Raises:
        UsageError: The recipe is unreadable or a step is malformed (nothing is applied).
        GraphkitError: What a step's edit raises, prefixed with the step's position.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.boolean(check, "check")
    if isinstance(recipe, (str, os.PathLike)):
        argcheck.path(recipe, "recipe")
        recipe = load_recipe(recipe)
    elif not isinstance(recipe, Recipe):
        argcheck.instance(recipe, "recipe", (list, tuple), "a recipe file, a Recipe or a list of steps")
        recipe = Recipe(tuple(parse_steps(list(recipe))))
    result, _ = run_steps(model, recipe.steps, base_dir=recipe.base_dir, allow_noop=True, check=check)
    return result


def dump_recipe(steps: Sequence[Step], path: str | os.PathLike[str]) -> str:
    """The text of a recipe file for ``steps``: YAML for ``.yaml``/``.yml`` paths, else JSON."""
    data = [s.to_dict() for s in steps]
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        import yaml

        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return json.dumps(data, indent=2) + "\n"


def save_recipe(steps: Sequence[Step], path: str | os.PathLike[str]) -> None:
    """Write steps as a recipe file (YAML for ``.yaml``/``.yml``, else JSON), atomically.

    Raises:
        UsageError: The path names a device, FIFO or folder, or a name is too long.
        WriteError: The file cannot be written.
    """
    text = dump_recipe(steps, path)
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
