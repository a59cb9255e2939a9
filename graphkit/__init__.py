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
from graphkit.run import make_feeds, run
from graphkit.summary import Summary, summarize
from graphkit.validate import Issue, Report, toposort, validate

__version__ = "0.1.0"

__all__ = [
    "CorruptModelError",
    "CycleError",
    "EditError",
    "Exposure",
    "Extraction",
    "ExternalDataError",
    "FeedError",
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
    "RuntimeFailure",
    "Summary",
    "TensorType",
    "TensorNotFoundError",
    "UnsafePathError",
    "UsageError",
    "WriteError",
    "__version__",
    "expose",
    "expose_with_report",
    "extract",
    "extract_with_report",
    "load",
    "make_feeds",
    "parse_model",
    "run",
    "save",
    "summarize",
    "tensor_value",
    "toposort",
    "validate",
]
