"""graphkit: pure-ONNX graph surgery and debugging.

Load a model (weights stay on disk), look inside it, check it, cut it, edit it, run pieces of it
through ONNX Runtime, and find the node where its numbers go wrong.
"""

from __future__ import annotations

from graphkit.build import GraphBuilder, parse_model
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
    "load",
    "load_split",
    "make_feeds",
    "parse_model",
    "run",
    "run_chain",
    "run_detailed",
    "save",
    "split",
    "summarize",
    "tensor_value",
    "toposort",
    "validate",
    "write_split",
]
