"""Opset imports of two models put together (merge, splice): one version per domain, or an error
naming the operators that keep the two apart.

Two imports of a standard domain at different versions are reconciled without converting anything
when every operator the models use means the same at one of the two versions (its schema there is
the one it already has): the import of that version is then valid for both. Otherwise the error
lists the operators whose definition changed between the versions, so the user knows what a
conversion (onnx.version_converter, or re-exporting) must deal with. Local functions are not
operators with schemas; custom domains must agree exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import onnx
import onnx.version_converter

from graphkit._model import iter_graphs
from graphkit.errors import EditError

__all__ = ["merged_opsets", "model_nodes", "norm_domain"]

STANDARD_DOMAINS = {"", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}


def norm_domain(domain: str | None) -> str:
    """``ai.onnx`` and None are the default domain ""."""
    return "" if domain in (None, "ai.onnx") else str(domain)


def model_nodes(proto: onnx.ModelProto) -> Iterable[onnx.NodeProto]:
    """Every node of every graph (bodies included) and of every local function."""
    for graph, _ in iter_graphs(proto.graph):
        yield from graph.node
    for func in proto.functions:
        yield from func.node


def _versions(proto: onnx.ModelProto) -> dict[str, int]:
    return {norm_domain(o.domain): int(o.version) for o in proto.opset_import}


def _ops(proto: onnx.ModelProto, domain: str) -> set[str]:
    functions = {(norm_domain(f.domain), f.name) for f in proto.functions}
    return {n.op_type for n in model_nodes(proto)
            if norm_domain(n.domain) == domain and (domain, n.op_type) not in functions}


def _since(op: str, version: int, domain: str) -> int | None:
    try:
        return int(onnx.defs.get_schema(op, version, domain).since_version)
    except onnx.defs.SchemaError:
        return None


def _changed(ops: Iterable[str], domain: str, own: int, target: int) -> list[str]:
    """The operators whose definition at opset ``target`` is not the one they have at ``own``."""
    found = []
    for op in sorted(ops):
        before, after = _since(op, own, domain), _since(op, target, domain)
        if before is None:  # (unknown to onnx: nothing to compare; the result's check judges it)
            continue
        if after != before:
            found.append(f"{op} ({op}-{before} at opset {own}, "
                         + (f"{op}-{after} at opset {target})" if after is not None else f"absent at opset {target})"))
    return found


def merged_opsets(models: Sequence[tuple[onnx.ModelProto, str]], *, convertible: Sequence[int] = ()) -> dict[str, int]:
    """One version per domain for the models (``(proto, name)`` pairs, first one first).

    For a domain imported at two versions, the higher is tried first, then the lower: a version is
    taken when every operator of that domain in both models has the same schema there as at its
    model's own version. Failing that, the models at ``convertible`` positions that import ai.onnx
    at another version are converted to the higher, then the lower version by
    onnx.version_converter, in place.

    Raises:
        EditError: No version fits both (the operators that differ are listed), or a custom domain
            is imported at two versions.
    """
    found: dict[str, int] = {}
    for proto, _ in models:
        for domain, version in _versions(proto).items():
            found.setdefault(domain, version)
    for domain in list(found):
        versions = [(name, _versions(proto).get(domain)) for proto, name in models]
        distinct = sorted({v for _, v in versions if v is not None}, reverse=True)
        if len(distinct) < 2:
            continue
        label = domain or "ai.onnx"
        listing = " but ".join(f"{name} imports {label} opset {v}" for name, v in versions if v is not None)
        if domain not in STANDARD_DOMAINS:
            raise EditError(f"{listing}: a custom domain's versions cannot be reconciled",
                            hint="bring both models to the same version of that domain first")
        fits = _exact_fit(models, domain, distinct)
        if isinstance(fits, int):
            found[domain] = fits
            continue
        converted = _converted(models, distinct, convertible) if domain == "" else None
        if isinstance(converted, int):
            found[domain] = converted
            continue
        shown = "; ".join(fits[:4]) + (f" (and {len(fits) - 4} more)" if len(fits) > 4 else "")
        why = f"; onnx.version_converter cannot convert it either: {converted}" if converted else ""
        raise EditError(f"{listing}, and no version fits both models' operators: {shown}{why}",
                        hint="convert one model to the other's opset first (re-export it, or fix what "
                             "onnx.version_converter stops at), then try again")
    return found


def _exact_fit(models: Sequence[tuple[onnx.ModelProto, str]], domain: str, distinct: Sequence[int]) -> int | list[str]:
    """The first version of ``distinct`` at which every model's operators keep their schema, or the
    operators that change at the first one."""
    reported: list[str] = []
    for target in distinct:
        problems: list[str] = []
        for proto, name in models:
            own = _versions(proto).get(domain)
            if own is not None and own != target:
                problems += [f"{name}: {p}" for p in _changed(_ops(proto, domain), domain, own, target)]
        if not problems:
            return target
        reported = reported or problems
    return reported


def _converted(models: Sequence[tuple[onnx.ModelProto, str]], distinct: Sequence[int],
               convertible: Sequence[int]) -> int | str | None:
    """Convert the convertible models to one ai.onnx version (the higher first); the version, or
    the converter's complaint (None when no model may be converted)."""
    complaint: str | None = None
    for target in distinct:
        others = [i for i, (proto, _) in enumerate(models) if _versions(proto).get("") not in (None, target)]
        if not others or any(i not in convertible for i in others):
            continue
        done: dict[int, onnx.ModelProto] = {}
        for i in others:
            proto, name = models[i]
            try:
                done[i] = onnx.version_converter.convert_version(proto, target)
            except Exception as err:  # the converter raises plain exceptions (RuntimeError, IndexError)
                complaint = complaint or f"{name} to opset {target}: {str(err).strip().splitlines()[0][:200]}"
                break
        else:
            for i, new in done.items():
                models[i][0].CopyFrom(new)
            return target
    return complaint
