"""What each job of ``bench_compare.py`` runs in its own interpreter (see ``_measure.python_call``).

Every function returns ``{"work_s": seconds after imports, ...}``.
"""

from __future__ import annotations

import time


def _feeds(model):  # type: ignore[no-untyped-def]
    from graphkit._run import make_feeds

    return make_feeds(model)


def plain_run(model: str) -> dict[str, float]:
    """The floor: graphkit.load + one ONNX Runtime run of the model (all optimizations)."""
    import graphkit

    start = time.perf_counter()
    loaded = graphkit.load(model)
    graphkit.run(loaded, _feeds(loaded))
    return {"work_s": time.perf_counter() - start}


def expose_all(model: str) -> dict[str, float]:
    """Every node output made a graph output, one session, one run (what mark-all tools do)."""
    import onnx

    import graphkit
    from graphkit._run import session

    start = time.perf_counter()
    loaded = graphkit.load(model)
    proto = loaded.proto
    have = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        for name in node.output:
            if name and name not in have:
                proto.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    feeds = _feeds(loaded)
    values = session(loaded).run(None, feeds)
    total = sum(v.nbytes for v in values)
    return {"work_s": time.perf_counter() - start, "tensors": len(values), "exposed_mb": total / 2**20}


def graphkit_compare(model: str, fragment_mb: float) -> dict[str, float]:
    """graphkit.compare: ORT (all optimizations) against ORT (none), every tensor, fragment by fragment."""
    import graphkit

    start = time.perf_counter()
    loaded = graphkit.load(model)
    result = graphkit.compare(loaded, fragment_bytes=int(fragment_mb * 2**20))
    return {"work_s": time.perf_counter() - start, "tensors": len(result.tensors), "runs": result.runs,
            "passed": result.passed}
