"""Every error graphkit raises on purpose.

Each error carries the fact in its message and the remedy in ``hint``. The CLI prints
``graphkit: error: <message>`` and ``hint: <hint>`` and exits 2. Errors also subclass the
matching built-in (``KeyError``, ``ValueError``, ``OSError``) so ``except KeyError`` keeps working.
No other module defines exceptions.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "ArgumentTypeError",
    "CorruptModelError",
    "CycleError",
    "EditError",
    "ExternalDataError",
    "FeedError",
    "GraphkitError",
    "InvalidModelError",
    "ModelNotFoundError",
    "NameNotFoundError",
    "NodeNotFoundError",
    "NoChangeError",
    "OpenCutError",
    "RuntimeFailure",
    "TensorNotFoundError",
    "UnsafePathError",
    "UsageError",
    "WriteError",
    "did_you_mean",
    "not_found",
]


class GraphkitError(Exception):
    """Base of every error a user can cause.

    Args:
        message: What is wrong, naming the file, node or tensor.
        hint: What to do about it, in the API's words (keywords such as ``downstream=True``).
        cli_hint: The same advice in the command line's words (flags such as
            ``--remove-node-downstream``), where it differs; the CLI prints it instead of ``hint``.
    """

    def __init__(self, message: str, *, hint: str | None = None, cli_hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.cli_hint = cli_hint

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return self.message


class UsageError(GraphkitError, ValueError):
    """Arguments that do not fit together (bad flag values, contradictory options)."""


class ArgumentTypeError(UsageError, TypeError):
    """A Python argument of the wrong type (``except TypeError`` and ``except ValueError`` both catch it)."""


class ModelNotFoundError(GraphkitError, FileNotFoundError):
    """A model path that does not exist or is not a file."""


class CorruptModelError(GraphkitError, ValueError):
    """A file that is not a readable ONNX model (truncated, not protobuf, not ONNX)."""


class ExternalDataError(GraphkitError, ValueError):
    """External weights that are missing, truncated or inconsistent with their tensor."""


class UnsafePathError(ExternalDataError):
    """An external-data location that would escape the model's folder."""


class InvalidModelError(GraphkitError, ValueError):
    """A model that onnx.checker, ONNX Runtime or graphkit's structural checks reject."""


class NameNotFoundError(GraphkitError, KeyError):
    """A name (tensor, node, input…) that the model does not have."""


class TensorNotFoundError(NameNotFoundError):
    """A tensor name that no node, input or initializer of the model defines."""


class NodeNotFoundError(NameNotFoundError):
    """A node name that the model does not have."""


class OpenCutError(GraphkitError, ValueError):
    """Requested outputs cannot be computed from the requested inputs."""


class CycleError(GraphkitError, ValueError):
    """The graph has a cycle, so it has no execution order."""


class FeedError(GraphkitError, ValueError):
    """An input value of the wrong name, dtype or shape, or one that cannot be read."""


class EditError(GraphkitError, ValueError):
    """An edit that cannot be applied as asked."""


class NoChangeError(GraphkitError, ValueError):
    """An operation that would change nothing (a silent no-op is reported instead)."""


class WriteError(GraphkitError, OSError):
    """An output that cannot be written (read-only folder, full disk, own input)."""


class RuntimeFailure(GraphkitError, RuntimeError):
    """ONNX Runtime refused to load or run a model."""


def did_you_mean(name: str, candidates: Iterable[str], *, n: int = 3) -> str | None:
    """Return a "did you mean …" phrase for ``name`` among ``candidates``, or None.

    Args:
        name: The unknown name the user gave.
        candidates: The names that exist.
        n: How many suggestions at most.
    """
    pool = list(dict.fromkeys(candidates))
    import difflib  # (only an unknown name needs it)

    close = difflib.get_close_matches(name, pool, n=n, cutoff=0.5)
    if not close:
        lowered = name.lower()
        close = [c for c in pool if lowered in c.lower()][:n]
    if not close:
        return None
    return "did you mean " + " or ".join(repr(c) for c in close) + "?"


#: Which ``inspect`` listing shows the names of each kind ("" for the plain summary).
_INSPECT_FLAG = {"node": " --nodes", "node of op type": " --nodes", "graph input": "", "graph output": "",
                 "graph input or output": "", "opset import": "", "operator": "", "initializer": " --tensors"}


def not_found(
    kind: type[NameNotFoundError], what: str, name: str, candidates: Iterable[str], *, where: str | None = None
) -> NameNotFoundError:
    """Build a not-found error for ``name`` with a did-you-mean hint.

    Args:
        kind: The error class to build.
        what: What kind of name this is ("tensor", "node", "graph input").
        name: The unknown name.
        candidates: The names that exist.
        where: The model file or graph to name in the message.
    """
    pool = list(candidates)
    location = f" in {where}" if where else ""
    suggestion = did_you_mean(name, pool)
    cli_hint = None
    if suggestion:
        hint = suggestion
    elif pool:
        hint = f"e.g. {', '.join(repr(c) for c in pool[:3])}"
        lister = _INSPECT_FLAG.get(what, " --tensors" if "tensor" in what else None)
        if lister is not None:
            path = where if where and where.endswith(".onnx") and "'" not in where else "MODEL"
            cli_hint = f"'python -m graphkit inspect {path}{lister}' lists the names; " + hint
            api = "gk.list_nodes(model)" if lister else "gk.summarize(model)"
            hint = f"{api} lists the names; " + hint
    else:
        hint = f"the model has no {what} names at all"
    return kind(f"no {what} named {name!r}{location}", hint=hint, cli_hint=cli_hint)
