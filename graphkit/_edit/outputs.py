"""Graph outputs as edits: add a tensor as a typed graph output, or remove one with what only it needed.

``remove_output`` then ``add_output`` is how a classifier's ZipMap is dropped and its probabilities
exposed; both are recipe steps and ``edit`` options.
"""

from __future__ import annotations

from graphkit import _check_args as argcheck
from graphkit._edit._common import _finish, _noop_returns_input, _refuse_function_tensor
from graphkit._edit.cleaning import _prune
from graphkit._extract import expose
from graphkit._model import Model
from graphkit.errors import EditError, NoChangeError, TensorNotFoundError, not_found

__all__ = ["add_output", "remove_output"]


@_noop_returns_input
def add_output(model: Model, /, tensor: str, *, check: bool = True) -> Model:
    """Make a main-graph tensor a graph output, typed (from value_info, inference or one observed run).

    Raises:
        TensorNotFoundError: No tensor of the main graph has that name (a tensor inside a body cannot be
            a graph output: the error names the node holding the body).
        UsageError: Its type cannot be found.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor name")
    argcheck.boolean(check, "check")
    if name in {o.name for o in model.lazy_proto.graph.output}:
        raise NoChangeError(f"{name!r} is already a graph output of {model.name}", hint="drop this edit")
    _refuse_function_tensor(model, model.lazy_proto, name, "add_output")
    result = expose(model, [name], check=False)
    return _finish(model, result.lazy_proto, check=check, what=f"add_output {name}")


@_noop_returns_input
def remove_output(model: Model, /, tensor: str, *, check: bool = True) -> Model:
    """Remove a graph output, and every node and initializer that only it needed (graph inputs stay:
    they are what callers feed).

    Raises:
        TensorNotFoundError: No graph output has that name.
        EditError: It is the model's only output.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor name")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    graph = proto.graph
    outputs = [o.name for o in graph.output]
    if name not in outputs:
        _refuse_function_tensor(model, proto, name, "remove_output")
        raise not_found(TensorNotFoundError, "graph output", name, outputs, where=model.name)
    if len(outputs) == 1:
        raise EditError(f"{name!r} is the only graph output of {model.name}; a model needs one",
                        hint="add the output you want first (add_output), then remove this one",
                        cli_hint="add the output you want first (--add-output), then remove this one")
    kept = [o for o in graph.output if o.name != name]
    del graph.output[:]
    graph.output.extend(kept)
    if name not in {o.name for o in kept}:
        _prune(graph, fed=[name])
    return _finish(model, proto, check=check, what=f"remove_output {name}")

