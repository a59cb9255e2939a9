"""graphkit: pure-ONNX graph surgery and debugging.

Load a model (weights stay on disk), look inside it, check it, cut it, edit it, run pieces of it
through ONNX Runtime, and find the node where its numbers go wrong.

Importing the package is cheap: each public name is imported from its module on first use (PEP 562),
so ``import graphkit; graphkit.load(...)`` never pays for ONNX Runtime, onnx-graphsurgeon or the
compare/edit/split/run machinery. The implementation modules are private (``graphkit._extract``,
``graphkit._edit``, ...) and this file re-exports the public API from one table, so ``graphkit.extract``
is always the function and no module shadows it. ``graphkit.errors`` (the exceptions) and
``graphkit.cli`` are the only public submodules.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphkit._build import GraphBuilder, parse_model
    from graphkit._chain import ChainResult, FragmentRun, OutputDiff, run_chain
    from graphkit._compare import (
        Comparison,
        Divergence,
        FiniteCheck,
        Fusion,
        MarkerResult,
        NonFinite,
        TensorDiff,
        ValueRange,
        check_finite,
        compare,
        markers,
    )
    from graphkit._convert import (
        Clamped,
        Float16Conversion,
        KeptNode,
        set_dtype,
        to_float16,
        to_float16_with_report,
    )
    from graphkit._custom_ops import CustomOp, custom_op, load_python_ops
    from graphkit._diff import Change, ModelDiff, diff
    from graphkit._edit import (
        add_output,
        bypass_node,
        cleanup,
        constant_to_input,
        from_graphsurgeon,
        initializer_to_input,
        input_to_initializer,
        insert_node,
        merge,
        remove_attribute,
        remove_node,
        remove_output,
        rename_node,
        rename_pattern,
        rename_tensor,
        replace_dim,
        replace_op,
        replace_span,
        set_attribute,
        set_dims,
        set_initializer,
        set_op_type,
        set_opset,
        to_graphsurgeon,
    )
    from graphkit._extract import (
        Exposure,
        Extraction,
        TensorType,
        expose,
        expose_with_report,
        extract,
        extract_with_report,
    )
    from graphkit._infer import Retyped, ShapeInference, Untyped, infer_shapes, infer_shapes_with_report
    from graphkit._io import load, save, tensor_value
    from graphkit._listing import Listing, NodeInfo, OpStats, TensorInfo, list_nodes
    from graphkit._mixed import MixedNode, MixedPrecision, auto_mixed_precision
    from graphkit._model import Model
    from graphkit._opset import OpsetConversion, convert_opset, convert_opset_with_report
    from graphkit._options import Backend, Balance, FeedOptions, OptLevel, Provider, Tolerance
    from graphkit._recipe import Recipe, Step, apply_recipe, load_recipe
    from graphkit._reduce import Failure, Reduction, reduce, save_repro
    from graphkit._run import FeedNote, RunResult, TensorStats, make_feeds, run, run_detailed
    from graphkit._simplify import (
        Simplification,
        constants_to_initializers,
        fold_constants,
        fold_shapes,
        fuse_attention,
        fuse_conv,
        fuse_gelu,
        fuse_gemm,
        fuse_skip_layernorm,
        inline_branches,
        merge_constants,
        merge_nodes,
        remove_identities,
        simplify,
        simplify_with_report,
    )
    from graphkit._split import Fragment, Port, Split, load_split, split, write_split
    from graphkit._summary import Summary, TensorSig, summarize
    from graphkit._validate import Issue, Report, toposort, validate
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

__version__ = "0.1.0"

__all__ = [
    "ArgumentTypeError",
    "Backend",
    "Balance",
    "ChainResult",
    "Change",
    "Clamped",
    "Comparison",
    "CorruptModelError",
    "CustomOp",
    "CycleError",
    "Divergence",
    "EditError",
    "Exposure",
    "ExternalDataError",
    "Extraction",
    "Failure",
    "FeedError",
    "FeedNote",
    "FeedOptions",
    "FiniteCheck",
    "Float16Conversion",
    "Fragment",
    "FragmentRun",
    "Fusion",
    "GraphBuilder",
    "GraphkitError",
    "InvalidModelError",
    "Issue",
    "KeptNode",
    "Listing",
    "MarkerResult",
    "MixedNode",
    "MixedPrecision",
    "Model",
    "ModelDiff",
    "ModelNotFoundError",
    "NameNotFoundError",
    "NoChangeError",
    "NodeInfo",
    "NodeNotFoundError",
    "NonFinite",
    "OpStats",
    "OpenCutError",
    "OpsetConversion",
    "OptLevel",
    "OutputDiff",
    "Port",
    "Provider",
    "Recipe",
    "Reduction",
    "Report",
    "Retyped",
    "RunResult",
    "RuntimeFailure",
    "ShapeInference",
    "Simplification",
    "Split",
    "Step",
    "Summary",
    "TensorDiff",
    "TensorInfo",
    "TensorNotFoundError",
    "TensorSig",
    "TensorStats",
    "TensorType",
    "Tolerance",
    "UnsafePathError",
    "Untyped",
    "UsageError",
    "ValueRange",
    "WriteError",
    "__version__",
    "add_output",
    "apply_recipe",
    "auto_mixed_precision",
    "bypass_node",
    "check_finite",
    "cleanup",
    "compare",
    "constant_to_input",
    "constants_to_initializers",
    "convert_opset",
    "convert_opset_with_report",
    "custom_op",
    "diff",
    "expose",
    "expose_with_report",
    "extract",
    "extract_with_report",
    "fold_constants",
    "fold_shapes",
    "from_graphsurgeon",
    "fuse_attention",
    "fuse_conv",
    "fuse_gelu",
    "fuse_gemm",
    "fuse_skip_layernorm",
    "infer_shapes",
    "infer_shapes_with_report",
    "initializer_to_input",
    "inline_branches",
    "input_to_initializer",
    "insert_node",
    "list_nodes",
    "load",
    "load_python_ops",
    "load_recipe",
    "load_split",
    "make_feeds",
    "markers",
    "merge",
    "merge_constants",
    "merge_nodes",
    "parse_model",
    "reduce",
    "remove_attribute",
    "remove_identities",
    "remove_node",
    "remove_output",
    "rename_node",
    "rename_pattern",
    "rename_tensor",
    "replace_dim",
    "replace_op",
    "replace_span",
    "run",
    "run_chain",
    "run_detailed",
    "save",
    "save_repro",
    "set_attribute",
    "set_dims",
    "set_dtype",
    "set_initializer",
    "set_op_type",
    "set_opset",
    "simplify",
    "simplify_with_report",
    "split",
    "summarize",
    "tensor_value",
    "to_float16",
    "to_float16_with_report",
    "to_graphsurgeon",
    "toposort",
    "validate",
    "write_split",
]

#: Public names by the submodule that defines them; each is imported on first access.
_EXPORTS_BY_MODULE: dict[str, tuple[str, ...]] = {
    "_listing": ("Listing", "NodeInfo", "OpStats", "TensorInfo", "list_nodes"),
    "_chain": ("ChainResult", "FragmentRun", "OutputDiff", "run_chain"),
    "_reduce": ("Failure", "Reduction", "reduce", "save_repro"),
    "_convert": ("Clamped", "Float16Conversion", "KeptNode", "set_dtype", "to_float16", "to_float16_with_report"),
    "_mixed": ("MixedNode", "MixedPrecision", "auto_mixed_precision"),
    "_opset": ("OpsetConversion", "convert_opset", "convert_opset_with_report"),
    "_custom_ops": ("CustomOp", "custom_op", "load_python_ops"),
    "_infer": ("Retyped", "ShapeInference", "Untyped", "infer_shapes", "infer_shapes_with_report"),
    "_options": ("Backend", "Balance", "FeedOptions", "OptLevel", "Provider", "Tolerance"),
    "_simplify": (
        "Simplification", "constants_to_initializers", "fold_constants", "fold_shapes", "fuse_attention", "fuse_conv",
        "fuse_gelu", "fuse_gemm", "fuse_skip_layernorm", "inline_branches", "merge_constants", "merge_nodes", "remove_identities", "simplify", "simplify_with_report",
    ),
    "_build": ("GraphBuilder", "parse_model"),
    "_compare": (
        "Comparison", "Divergence", "FiniteCheck", "Fusion", "MarkerResult", "NonFinite", "TensorDiff", "ValueRange",
        "check_finite", "compare", "markers",
    ),
    "_diff": ("Change", "ModelDiff", "diff"),
    "_edit": (
        "add_output", "bypass_node", "cleanup", "constant_to_input", "from_graphsurgeon",
        "initializer_to_input", "input_to_initializer", "insert_node", "merge", "remove_attribute",
        "remove_node", "remove_output", "rename_node", "rename_pattern", "rename_tensor", "replace_dim",
        "replace_op", "replace_span", "set_attribute", "set_dims", "set_initializer", "set_op_type", "set_opset",
        "to_graphsurgeon",
    ),
    "errors": (
        "ArgumentTypeError", "CorruptModelError", "CycleError", "EditError", "ExternalDataError", "FeedError",
        "GraphkitError", "InvalidModelError", "ModelNotFoundError", "NameNotFoundError",
        "NoChangeError", "NodeNotFoundError", "OpenCutError", "RuntimeFailure", "TensorNotFoundError",
        "UnsafePathError", "UsageError", "WriteError",
    ),
    "_extract": (
        "Exposure", "Extraction", "TensorType", "expose", "expose_with_report", "extract",
        "extract_with_report",
    ),
    "_io": ("load", "save", "tensor_value"),
    "_model": ("Model",),
    "_recipe": ("Recipe", "Step", "apply_recipe", "load_recipe"),
    "_run": ("FeedNote", "RunResult", "TensorStats", "make_feeds", "run", "run_detailed"),
    "_split": ("Fragment", "Port", "Split", "load_split", "split", "write_split"),
    "_summary": ("Summary", "TensorSig", "summarize"),
    "_validate": ("Issue", "Report", "toposort", "validate"),
}
_EXPORTS: dict[str, str] = {
    name: f"graphkit.{module}" for module, names in _EXPORTS_BY_MODULE.items() for name in names
}


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
        try:  # a public submodule not yet imported (graphkit.errors, graphkit.cli)
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
