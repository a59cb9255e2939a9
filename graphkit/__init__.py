"""graphkit: pure-ONNX graph surgery and debugging.

Load a model (weights stay on disk), look inside it, check it, cut it, edit it, run pieces of it
through ONNX Runtime, and find the node where its numbers go wrong.
"""

from __future__ import annotations

from graphkit.build import GraphBuilder, parse_model
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
from graphkit.io import load, save, tensor_value
from graphkit.model import Model
from graphkit.recipe import apply_recipe, load_recipe
from graphkit.run import ChainResult, RunResult, make_feeds, run, run_chain, run_detailed
from graphkit.split import Fragment, Split, load_split, split, write_split
from graphkit.summary import Summary, summarize
from graphkit.validate import Issue, Report, toposort, validate

__version__ = "0.1.0"

__all__ = [
    "ChainResult",
    "CorruptModelError",
    "CycleError",
    "EditError",
    "ExternalDataError",
    "FeedError",
    "Fragment",
    "GraphBuilder",
    "GraphkitError",
    "InvalidModelError",
    "Issue",
    "Model",
    "ModelNotFoundError",
    "NameNotFoundError",
    "NoChangeError",
    "NodeNotFoundError",
    "OpenCutError",
    "Report",
    "RunResult",
    "RuntimeFailure",
    "Split",
    "Summary",
    "TensorNotFoundError",
    "UnsafePathError",
    "UsageError",
    "WriteError",
    "__version__",
    "apply_recipe",
    "bypass_node",
    "cleanup",
    "constant_to_input",
    "fold_constants",
    "from_graphsurgeon",
    "initializer_to_input",
    "input_to_initializer",
    "insert_node",
    "load",
    "load_recipe",
    "load_split",
    "make_feeds",
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
