"""Recipes: a list of edits in a JSON or YAML file, applied in order, reviewable and replayable.

    - op: set_op_type          # a function of graphkit.edit
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

import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphkit import _check_args as argcheck
from graphkit import edit
from graphkit.errors import NoChangeError, UsageError, did_you_mean
from graphkit.io import atomic_output, load
from graphkit.model import Model

__all__ = ["OPERATIONS", "Recipe", "Step", "StepResult", "apply_recipe", "load_recipe", "run_steps", "save_recipe"]

#: Recipe operation name → edit function (merge takes ``other``, a model path).
OPERATIONS: dict[str, Callable[..., Model]] = {
    name: getattr(edit, name)
    for name in (
        "set_attribute", "remove_attribute", "set_op_type", "rename_tensor", "rename_node", "bypass_node",
        "remove_node", "insert_node", "set_initializer", "initializer_to_input", "constant_to_input",
        "input_to_initializer", "set_dims", "replace_op", "set_opset", "cleanup", "fold_constants", "merge",
    )
}
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
    """What one applied step did."""

    op: str
    args: dict[str, Any]
    changed: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"op": self.op, "args": self.args, "changed": self.changed}


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read a recipe file (``.json``, or ``.yaml``/``.yml``) and check its steps' form.

    Raises:
        UsageError: The file is missing or unreadable, or a step is malformed or unknown.
    """
    argcheck.path(path, "path")
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read recipe {file}: {err.strerror}", hint="check the path") from err
    except UnicodeDecodeError as err:
        raise UsageError(f"recipe {file} is not UTF-8 text: {err.reason} at byte {err.start}",
                         hint="give a JSON or YAML recipe file") from err
    try:
        if file.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as err:  # json and yaml raise their own types
        raise UsageError(f"recipe {file} is not valid {'YAML' if file.suffix.lower() in ('.yaml', '.yml') else 'JSON'}: "
                         f"{err}", hint="fix the syntax at the position shown") from err
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
        UsageError: The .npy file cannot be read or the dtype is unknown.
    """
    if isinstance(value, Mapping) and set(value) == {"npy"}:
        path = base_dir / str(value["npy"])
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(f"cannot read tensor file {path}: {err}", hint="give a .npy file (numpy.save)") from err
    if isinstance(value, Mapping) and set(value) == {"value", "dtype"}:
        try:
            return np.asarray(value["value"], dtype=np.dtype(str(value["dtype"])))
        except (TypeError, ValueError) as err:
            raise UsageError(f"cannot make a {value['dtype']} tensor of {value['value']!r}: {err}",
                             hint="use a numpy dtype name such as float32 or int64") from err
    if isinstance(value, list):
        return [decode_value(v, base_dir) for v in value]
    if isinstance(value, Mapping):
        return {k: decode_value(v, base_dir) for k, v in value.items()}
    return value


def _call_args(step: Step, base_dir: Path) -> dict[str, Any]:
    args = {k: (decode_value(v, base_dir) if k in _TENSOR_ARGS else v) for k, v in step.args.items()}
    if step.op == "set_dims" and isinstance(args.get("dims"), Mapping):
        args["dims"] = {int(k): v for k, v in args["dims"].items()}
    if step.op == "merge":
        args["other"] = load(base_dir / str(args["other"]))
        if isinstance(args.get("prefixes"), list):
            args["prefixes"] = tuple(args["prefixes"])
    return args


def run_steps(model: Model, steps: Sequence[Step], *, base_dir: str | os.PathLike[str] = ".",
              allow_noop: bool = False, check: bool = True) -> tuple[Model, list[StepResult]]:
    """Apply steps in order; return the result and what each step did.

    Every step's arguments (and .npy files) are read before the first edit is applied.

    Raises:
        UsageError: A step is malformed.
        NoChangeError: A step changed nothing (unless ``allow_noop``).
        GraphkitError: Whatever the step's edit raises, with the step's position added to the message.
    """
    folder = Path(base_dir)
    for i, step in enumerate(steps, 1):
        _check_step(step, i, "the recipe")
    prepared = [_call_args(step, folder) for step in steps]
    results: list[StepResult] = []
    current = model
    for i, (step, args) in enumerate(zip(steps, prepared), 1):
        try:
            current = _apply(current, step.op, args, check=check)
            results.append(StepResult(step.op, step.args, True))
        except NoChangeError as err:
            if not allow_noop:
                if len(steps) > 1:
                    err.message = f"step {i} ({step.op}): {err.message}"
                    err.args = (err.message,)
                raise
            results.append(StepResult(step.op, step.args, False))
        except Exception as err:
            if hasattr(err, "message") and len(steps) > 1:
                err.message = f"step {i} ({step.op}): {err.message}"
                err.args = (err.message,)
            raise
    return current, results


def _apply(model: Model, op: str, args: dict[str, Any], *, check: bool) -> Model:
    if op == "merge":
        other = args.pop("other")
        return edit.merge(model, other, check=check, **args)
    public = OPERATIONS[op]
    raising = getattr(public, "__wrapped__", public)  # (raises NoChangeError saying why a step changed nothing)
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


def save_recipe(steps: Sequence[Step], path: str | os.PathLike[str]) -> None:
    """Write steps as a recipe file (YAML for ``.yaml``/``.yml``, else JSON), atomically."""
    dest = Path(path)
    data = [s.to_dict() for s in steps]
    if dest.suffix.lower() in (".yaml", ".yml"):
        import yaml

        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(data, indent=2) + "\n"
    with atomic_output(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")
