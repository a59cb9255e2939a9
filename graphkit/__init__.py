"""graphkit: pure-ONNX graph surgery and debugging.

Load a model (weights stay on disk), look inside it, check it, cut it, edit it, run pieces of it
through ONNX Runtime, and find the node where its numbers go wrong.

Importing the package is cheap: each public name is imported from its module on first use (PEP 562),
so ``import graphkit; graphkit.load(...)`` never pays for ONNX Runtime, onnx-graphsurgeon or the
compare/edit/split/run machinery. Six names are both a submodule and a function (``compare``,
``diff``, ``extract``, ``run``, ``split``, ``validate``): ``graphkit.<name>`` is always the function,
whatever was imported before (see :class:`_Package`); the submodule stays in ``sys.modules``.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphkit._chain import ChainResult, FragmentRun, OutputDiff, run_chain
    from graphkit._options import Backend, Balance, FeedOptions, OptLevel, Provider, Tolerance
    from graphkit.build import GraphBuilder, parse_model
    from graphkit.compare import Comparison, Divergence, MarkerResult, TensorDiff, compare, markers
    from graphkit.diff import Change, ModelDiff, diff
    from graphkit.edit import (
        bypass_node,
        cleanup,
        constant_to_input,
        fold_constants,
        from_graphsurgeon,
        initializer_to_input,
        input_to_initializer,
        insert_node,
        merge,
        remove_attribute,
        remove_node,
        rename_node,
        rename_tensor,
        replace_op,
        set_attribute,
        set_dims,
        set_initializer,
        set_op_type,
        set_opset,
        to_graphsurgeon,
    )
    from graphkit.errors import (
        ArgumentTypeError,
        CorruptModelError,
        CycleError,
        EditError,
        ExternalDataError,
        FeedError,
        GraphkitError,
        InvalidModelError,
        ModelNotFoundError,
        NameNotFoundError,
        NoChangeError,
        NodeNotFoundError,
        OpenCutError,
        RuntimeFailure,
        TensorNotFoundError,
        UnsafePathError,
        UsageError,
        WriteError,
    )
    from graphkit.extract import (
        Exposure,
        Extraction,
        TensorType,
        expose,
        expose_with_report,
        extract,
        extract_with_report,
    )
    from graphkit.io import load, save, tensor_value
    from graphkit.model import Model
    from graphkit.recipe import Recipe, Step, apply_recipe, load_recipe
    from graphkit.run import FeedNote, RunResult, TensorStats, make_feeds, run, run_detailed
    from graphkit.split import Fragment, Port, Split, load_split, split, write_split
    from graphkit.summary import Summary, TensorSig, summarize
    from graphkit.validate import Issue, Report, toposort, validate

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "Backend",
    "Balance",
    "ChainResult",
    "Change",
    "Comparison",
    "CorruptModelError",
    "CycleError",
    "Divergence",
    "EditError",
    "Exposure",
    "ExternalDataError",
    "Extraction",
    "FeedError",
    "FeedNote",
    "FeedOptions",
    "Fragment",
    "FragmentRun",
    "GraphBuilder",
    "GraphkitError",
    "InvalidModelError",
    "Issue",
    "MarkerResult",
    "Model",
    "ModelDiff",
    "ModelNotFoundError",
    "NameNotFoundError",
    "NoChangeError",
    "NodeNotFoundError",
    "OpenCutError",
    "OptLevel",
    "OutputDiff",
    "Port",
    "Provider",
    "Recipe",
    "Report",
    "RunResult",
    "RuntimeFailure",
    "Split",
    "Step",
    "Summary",
    "TensorDiff",
    "TensorNotFoundError",
    "TensorSig",
    "TensorStats",
    "TensorType",
    "Tolerance",
    "UnsafePathError",
    "UsageError",
    "WriteError",
    "__version__",
    "apply_recipe",
    "bypass_node",
    "cleanup",
    "compare",
    "constant_to_input",
    "diff",
    "expose",
    "expose_with_report",
    "extract",
    "extract_with_report",
    "fold_constants",
    "from_graphsurgeon",
    "initializer_to_input",
    "input_to_initializer",
    "insert_node",
    "load",
    "load_recipe",
    "load_split",
    "make_feeds",
    "markers",
    "merge",
    "parse_model",
    "remove_attribute",
    "remove_node",
    "rename_node",
    "rename_tensor",
    "replace_op",
    "run",
    "run_chain",
    "run_detailed",
    "save",
    "set_attribute",
    "set_dims",
    "set_initializer",
    "set_op_type",
    "set_opset",
    "split",
    "summarize",
    "tensor_value",
    "to_graphsurgeon",
    "toposort",
    "validate",
    "write_split",
]

#: Public names by the submodule that defines them; each is imported on first access.
_EXPORTS_BY_MODULE: dict[str, tuple[str, ...]] = {
    "_chain": ("ChainResult", "FragmentRun", "OutputDiff", "run_chain"),
    "_options": ("Backend", "Balance", "FeedOptions", "OptLevel", "Provider", "Tolerance"),
    "build": ("GraphBuilder", "parse_model"),
    "compare": ("Comparison", "Divergence", "MarkerResult", "TensorDiff", "compare", "markers"),
    "diff": ("Change", "ModelDiff", "diff"),
    "edit": (
        "bypass_node", "cleanup", "constant_to_input", "fold_constants", "from_graphsurgeon",
        "initializer_to_input", "input_to_initializer", "insert_node", "merge", "remove_attribute",
        "remove_node", "rename_node", "rename_tensor", "replace_op", "set_attribute", "set_dims",
        "set_initializer", "set_op_type", "set_opset", "to_graphsurgeon",
    ),
    "errors": (
        "ArgumentTypeError", "CorruptModelError", "CycleError", "EditError", "ExternalDataError", "FeedError",
        "GraphkitError", "InvalidModelError", "ModelNotFoundError", "NameNotFoundError",
        "NoChangeError", "NodeNotFoundError", "OpenCutError", "RuntimeFailure", "TensorNotFoundError",
        "UnsafePathError", "UsageError", "WriteError",
    ),
    "extract": (
        "Exposure", "Extraction", "TensorType", "expose", "expose_with_report", "extract",
        "extract_with_report",
    ),
    "io": ("load", "save", "tensor_value"),
    "model": ("Model",),
    "recipe": ("Recipe", "Step", "apply_recipe", "load_recipe"),
    "run": ("FeedNote", "RunResult", "TensorStats", "make_feeds", "run", "run_detailed"),
    "split": ("Fragment", "Port", "Split", "load_split", "split", "write_split"),
    "summary": ("Summary", "TensorSig", "summarize"),
    "validate": ("Issue", "Report", "toposort", "validate"),
}
_EXPORTS: dict[str, str] = {
    name: f"graphkit.{module}" for module, names in _EXPORTS_BY_MODULE.items() for name in names
}
#: Names that are both a submodule and the function it defines (``graphkit.extract`` and so on).
_SHADOWED: frozenset[str] = frozenset(name for name, module in _EXPORTS.items() if module == f"graphkit.{name}")


class _Package(types.ModuleType):
    """The package module's class: binding submodule ``graphkit.<name>`` keeps the function ``<name>``.

    After loading ``graphkit.extract`` (for whatever reason: ``import graphkit.extract``, ``from
    graphkit.extract import _Graph`` inside another module, ...) the import system sets the package
    attribute ``extract`` to the submodule. For the names in ``_SHADOWED`` the function of the same
    name is bound instead, as the eager ``from graphkit.extract import extract`` used to do.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            name in _SHADOWED
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{name}"
            and hasattr(value, name)
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def _import(module_name: str) -> types.ModuleType:
    """``import <module_name>`` as a statement does it, so that ``python -X importtime`` reports it.

    (``importlib.import_module`` bypasses the interpreter's import timing for the module it imports.)
    """
    __import__(module_name)
    return sys.modules[module_name]


def _lazy_attribute(name: str) -> Any:
    """Import a public name (or a submodule) of the package on first access and cache it."""
    module_name = _EXPORTS.get(name)
    if module_name is not None:
        value = getattr(_import(module_name), name)
    elif not name.startswith("_"):
        try:  # a submodule not yet imported (graphkit.io, graphkit.edit, ...), as the eager import had them
            value = _import(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _dir() -> list[str]:
    """The public names (loaded or not) and whatever the module already holds."""
    return sorted(set(globals()) | set(__all__))


if not TYPE_CHECKING:  # for type checkers the names come from the imports above, not from __getattr__
    __getattr__ = _lazy_attribute
    __dir__ = _dir
