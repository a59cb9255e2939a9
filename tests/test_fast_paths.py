"""The fast paths of extraction give exactly what the general ones give.

- graphkit._propagate types a node's output exactly as ONNX shape inference does, or declines;
- the backward-scan cut (extract._scan_cut) keeps exactly what the full walk (_cut) keeps, or
  declines (unsorted graphs, open cuts, unknown names);
- extract with the fast paths returns byte-identical models to extract with them switched off,
  on random graphs, the fixtures and onnx's light models.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture
from onnx import TensorProto, helper

import graphkit as gk
from graphkit import _io, _typing
from graphkit import _propagate as propagate

gx = importlib.import_module("graphkit._extract")


UNARY = ["Relu", "Sigmoid", "Neg", "Abs", "Exp", "Identity", "Softmax", "LeakyRelu", "Gelu", "Not", "Floor"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Max", "Min", "Mean", "Sum"]
OTHER = ["Cast", "Transpose", "MatMul"]  # (Transpose and MatMul: not propagated; the fast path declines)
DIMS: list[int | str] = [1, 1, 2, 3, 4, "N", "M"]
ELEMS = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE]


COMPATIBLE: list[list[int | str]] = [["N", 3], [3], [1, 3], [], ["N", 1], [2, "N", 3], [1]]


def _random_shape(rng: random.Random, compatible: bool = False) -> list[int | str]:
    if compatible:
        return list(rng.choice(COMPATIBLE))
    return [rng.choice(DIMS) for _ in range(rng.randint(0, 4))]


def _random_model(rng: random.Random, nodes: int = 12, opset: int = 17, valid: bool = False) -> onnx.ModelProto:
    """A sorted graph of random elementwise ops over random shapes and types (often invalid ones:
    mismatched shapes and types are what the rules must decline exactly where inference does;
    ``valid``: float tensors of broadcast-compatible shapes and float ops only)."""
    inputs, inits, made = [], [], []
    avail: list[str] = []
    for k in range(rng.randint(1, 3)):
        shape = _random_shape(rng, valid)
        inputs.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT if valid else rng.choice(ELEMS), shape))
        avail.append(f"x{k}")
    for k in range(rng.randint(0, 3)):
        dims = [d if isinstance(d, int) else 3 for d in _random_shape(rng, valid)]
        elem = TensorProto.FLOAT if valid else rng.choice([TensorProto.FLOAT, TensorProto.INT64])
        values = np.ones(dims, dtype=np.float32 if elem == TensorProto.FLOAT else np.int64)
        inits.append(onnx.numpy_helper.from_array(values, f"w{k}"))
        avail.append(f"w{k}")
    for k in range(nodes):
        kind = rng.random()
        out = f"t{k}"
        if valid:
            op = rng.choice(["Relu", "Neg", "Exp", "Add", "Mul", "Sub", "Max", "Mean", "Sum", "Pow"])
            arity = 1 if op in ("Relu", "Neg", "Exp") else rng.randint(1, 3) if op in ("Max", "Mean", "Sum") else 2
            node = helper.make_node(op, [rng.choice(avail) for _ in range(arity)], [out])
        elif kind < 0.35:
            op = rng.choice(UNARY)
            node = helper.make_node(op, [rng.choice(avail)], [out])
        elif kind < 0.9:
            op = rng.choice(BINARY)
            arity = rng.randint(1, 3) if op in ("Max", "Min", "Mean", "Sum") else 2
            node = helper.make_node(op, [rng.choice(avail) for _ in range(arity)], [out])
        else:
            op = rng.choice(OTHER)
            if op == "Cast":
                node = helper.make_node(op, [rng.choice(avail)], [out], to=rng.choice(ELEMS))
            else:
                node = helper.make_node(op, [rng.choice(avail) for _ in range(1 if op == "Transpose" else 2)], [out])
        made.append(node)
        avail.append(out)
    graph = helper.make_graph(made, "g", inputs, [helper.make_tensor_value_info(avail[-1], 0, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _c_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except (onnx.shape_inference.InferenceError, RuntimeError):
        return {}
    return {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}


def _known(model: onnx.ModelProto) -> dict[str, propagate.FastType | None]:
    found: dict[str, propagate.FastType | None] = {v.name: propagate.type_of(v.type) for v in model.graph.input}
    for t in model.graph.initializer:
        found[t.name] = (t.data_type, tuple(t.dims))
    return found


def _cases(count: int, seed: int, valid: bool = False) -> Iterator[onnx.ModelProto]:
    rng = random.Random(seed)
    for _ in range(count):
        yield _random_model(rng, opset=rng.choice([8, 13, 17, 20]), valid=valid)


def test_each_propagated_type_is_the_one_shape_inference_gives() -> None:
    """Per node: given the input types ONNX inference found, propagate's output type equals
    inference's, or propagate declines; it never types what inference leaves untyped."""
    compared = declined = 0
    for model in _cases(400, seed=11):
        c_types = _c_types(model)
        opset = model.opset_import[0].version
        typer = propagate.Typer(opset)
        known = _known(model)
        for node in model.graph.node:
            ins = [known.get(n) for n in node.input]
            known[node.output[0]] = expected = (
                propagate.type_of(c_types[node.output[0]]) if node.output[0] in c_types else None
            )
            if any(t is None for t in ins) or not typer.supports(node.op_type, node.domain):
                continue
            got = typer.output(node, node.op_type, tuple(t for t in ins if t is not None))
            if got is None:
                declined += 1
                continue
            assert got == expected, (onnx.printer.to_text(node), ins, got, expected)
            compared += 1
    assert compared > 1000 and declined > 50, (compared, declined)


def test_propagation_over_whole_graphs_matches_inference() -> None:
    agreed = 0
    for model in _cases(300, seed=5, valid=True):
        c_types = _c_types(model)
        steps = [(n, n.op_type, list(n.input), n.output[0]) for n in model.graph.node]
        known = {k: v for k, v in _known(model).items() if v is not None}
        if len(known) < len(model.graph.input) + len(model.graph.initializer):
            continue
        types = dict(known)
        if not propagate.Typer(model.opset_import[0].version).run(steps, types):
            continue
        for node in model.graph.node:
            assert propagate.type_of(c_types[node.output[0]]) == types[node.output[0]]
        agreed += 1
    assert agreed > 100, agreed


def test_ops_missing_from_the_opset_are_not_propagated() -> None:
    typer = propagate.Typer(13)
    assert not typer.supports("Gelu", "")  # (Gelu came with opset 20)
    assert propagate.Typer(20).supports("Gelu", "")
    assert not propagate.Typer(7).supports("Add", "")
    assert not typer.supports("Relu", "custom")


# ------------------------------------------------------------------------------ cut equivalence


def _random_dag(rng: random.Random, sort: bool) -> onnx.ModelProto:
    names = ["x0", "x1"]
    inits = [onnx.numpy_helper.from_array(np.ones([2], np.float32), f"w{k}") for k in range(3)]
    nodes = []
    for k in range(rng.randint(3, 25)):
        pool = names + [t.name for t in inits]
        ins = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
        outs = [f"t{k}"] if rng.random() < 0.85 else [f"t{k}", f"t{k}b"]
        nodes.append(helper.make_node("Sum" if len(outs) == 1 else "Split", ins, outs, name=f"n{k}"))
        names.extend(outs)
    if not sort:
        rng.shuffle(nodes)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x0", "x1")]
    outputs = [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [2])]
    return helper.make_model(helper.make_graph(nodes, "dag", inputs, outputs, inits))


@pytest.mark.parametrize("sort", [True, False], ids=["sorted", "shuffled"])
def test_the_backward_scan_cut_equals_the_full_walk(sort: bool) -> None:
    rng = random.Random(3 if sort else 4)
    scanned = declined = 0
    for _ in range(400):
        proto = _random_dag(rng, sort)
        model = gk.Model(proto)
        tensors = [o for n in proto.graph.node for o in n.output] + ["x0", "x1", "w0"]
        inputs = rng.sample(tensors, rng.randint(0, 3))
        outputs = rng.sample([t for t in tensors if t not in inputs], rng.randint(1, 2))
        fast = gx._scan_cut(gx._Graph(model), inputs, outputs)
        full = gx._cut(gx._Graph(model), inputs, outputs)
        if fast is None:
            declined += 1
            continue
        assert not full.missing, (inputs, outputs)
        assert (fast.nodes, fast.initializers, fast.used_inputs) == (full.nodes, full.initializers, full.used_inputs)
        scanned += 1
    assert scanned > (60 if sort else 5), scanned
    assert declined > 20, declined


# --------------------------------------------------------------------- extract, fast vs general


@pytest.fixture
def no_fast_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(gx, "_scan_cut", lambda *a: None)
    monkeypatch.setattr(_typing, "_propagated_types", lambda *a: None)
    yield


def _both(model: gk.Model, inputs: list[str], outputs: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:
    fast = gx.extract_with_report(model, inputs, outputs)
    with monkeypatch.context() as m:
        m.setattr(gx, "_scan_cut", lambda *a: None)
        m.setattr(_typing, "_propagated_types", lambda *a: None)
        slow = gx.extract_with_report(model, inputs, outputs)
    assert fast.typed_by == slow.typed_by
    assert fast.unused_inputs == slow.unused_inputs and fast.notes == slow.notes
    return fast.model.proto.SerializeToString(), slow.model.proto.SerializeToString()


def _chain_model(stages: int = 6, width: int = 8) -> gk.Model:
    """A small many_nodes-like model: stages of Add-Mul-Relu branches merged by Mean (no value_info)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "x"
    for s in range(stages):
        ends = []
        for b in range(2):
            t = x
            for k, op in enumerate(("Add", "Mul", "Relu")):
                out = f"/s{s}/b{b}/{op.lower()}{k}"
                if op == "Relu":
                    nodes.append(helper.make_node(op, [t], [out]))
                else:
                    w = f"/s{s}/b{b}/w{k}"
                    inits.append(onnx.numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), w))
                    nodes.append(helper.make_node(op, [t, w], [out]))
                t = out
            ends.append(t)
        x = "y" if s == stages - 1 else f"/s{s}/out"
        nodes.append(helper.make_node("Mean", ends, [x]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])], inits)
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_fast_extraction_is_byte_identical_on_a_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chain_model()
    for inputs, outputs in [
        (["/s2/out"], ["/s3/b1/relu2"]),
        (["/s2/out"], ["/s3/out"]),
        (["/s2/out"], ["y"]),
        (["/s1/out", "x"], ["/s4/b0/add0", "/s3/out"]),
        (["x"], ["/s0/out"]),
    ]:
        fast, slow = _both(model, inputs, outputs, monkeypatch)
        assert fast == slow, (inputs, outputs)
    part = gk.extract(model, ["/s2/out"], ["/s3/out"])
    assert [d.dim_param or d.dim_value for d in part.graph.input[0].type.tensor_type.shape.dim] == ["N", 8]


def test_fast_extraction_is_byte_identical_on_the_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    model = gk.load(fixture("whole_model.onnx"))
    c12, c40 = "/convs1/convs1.2/Conv_output_0", "/convs4/convs4.0/Conv_output_0"
    fast, slow = _both(model, [c12], [c40], monkeypatch)
    assert fast == slow


@pytest.mark.parametrize("path", sorted(LIGHT.glob("light_*.onnx")), ids=lambda p: p.stem.removeprefix("light_"))
def test_fast_extraction_is_byte_identical_on_light_models(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = gk.load(path)
    nodes = model.graph.node
    mid = nodes[len(nodes) // 2].output[0]
    late = nodes[(3 * len(nodes)) // 4].output[0]
    for inputs, outputs in [([mid], [late]), ([mid], [o.name for o in model.graph.output])]:
        try:
            fast, slow = _both(model, inputs, outputs, monkeypatch)
        except gk.OpenCutError:
            continue  # (a branch elsewhere feeds the output: not a valid single-tensor cut)
        assert fast == slow, (path.name, inputs, outputs)


def test_fast_extraction_with_untypable_side_branches_and_unsorted_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An op propagation does not type (a MatMul off the cut's path, a Transpose on it) hands
    typing to ONNX inference; an unsorted node list hands both the cut and typing to the general
    paths. Every result is byte-identical to the general paths' and runs."""
    model = _chain_model()
    proto = model.proto
    side = helper.make_node("MatMul", ["/s1/out", "/s1/b0/w0"], ["side"])  # [N,8] x [8]: off the path
    proto.graph.node.insert(8, side)
    proto.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    with_side = gk.Model(proto)
    fast, slow = _both(with_side, ["/s2/out"], ["/s3/out"], monkeypatch)
    assert fast == slow
    # on the path: a Transpose feeding stage 2's output
    on_path = onnx.ModelProto()
    on_path.CopyFrom(proto)
    for node in on_path.graph.node:
        if node.output[0] == "/s1/out":
            node.output[0] = "/s1/pre"
    on_path.graph.node.insert(
        len([n for n in on_path.graph.node if not n.output[0].startswith(("/s2", "/s3", "/s4", "/s5", "y"))]),
        helper.make_node("Transpose", ["/s1/pre"], ["/s1/out"], perm=[0, 1]),
    )
    fast, slow = _both(gk.Model(on_path), ["/s2/out"], ["/s3/out"], monkeypatch)
    assert fast == slow
    shuffled = onnx.ModelProto()
    shuffled.CopyFrom(model.proto)
    nodes = list(shuffled.graph.node)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(reversed(nodes))
    result = gx.extract_with_report(gk.Model(shuffled), ["/s2/out"], ["/s3/out"])
    fast, slow = _both(gk.Model(shuffled), ["/s2/out"], ["/s3/out"], monkeypatch)
    assert fast == slow
    assert "sorted" in " ".join(result.notes)
    feeds = {"/s2/out": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    np.testing.assert_allclose(gk.run(result.model, feeds)["/s3/out"],
                               gk.run(gk.extract(model, ["/s2/out"], ["/s3/out"]), feeds)["/s3/out"], rtol=1e-6)


def test_the_ops_with_bodies_are_the_ones_onnx_defines() -> None:
    graph_kinds = {onnx.defs.OpSchema.AttrType.GRAPH, onnx.defs.OpSchema.AttrType.GRAPHS}
    with_bodies = {
        s.name for s in onnx.defs.get_all_schemas_with_history()
        if s.domain == "" and any(a.type in graph_kinds for a in s.attributes.values())
    }
    assert with_bodies == gx.BODY_OPS
    assert not gx._without_bodies("NotAnOnnxOp")  # (unknown ops are read with their attributes)


def test_an_unknown_op_with_a_body_brings_its_outer_reads() -> None:
    body = helper.make_graph([helper.make_node("Add", ["t", "outer"], ["b"])], "body", [],
                             [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    nodes = [
        helper.make_node("Relu", ["x"], ["t"]),
        helper.make_node("Relu", ["x"], ["outer"]),
        helper.make_node("Weird", ["t"], ["y"], domain="", body=body),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = gk.Model(helper.make_model(graph))
    cut = gx._scan_cut(gx._Graph(model), ["t", "x"], ["y"])
    assert cut is not None and cut.nodes == [1, 2] and cut.used_inputs == {"t", "x"}
    assert gx._scan_cut(gx._Graph(model), ["t"], ["y"]) is None  # (x is needed through the body: open cut)
    with pytest.raises(gk.OpenCutError, match="'x'"):
        gk.extract(model, ["t"], ["y"], check=False)


def test_propagation_stops_at_the_first_node_it_cannot_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model propagation does not suit costs it a node or two, not a pass over the graph."""
    model = _chain_model()
    proto = model.proto
    proto.graph.node.insert(0, helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 1]))
    proto.graph.node[1].input[0] = "xt"
    proto.graph.node[4].input[0] = "xt"
    seen: list[int] = []
    g = gx._Graph(gk.Model(proto))

    class Spy(list):  # type: ignore[type-arg]
        def __getitem__(self, i):  # type: ignore[no-untyped-def]
            seen.append(i)
            return list.__getitem__(self, i)

    g.nodes = Spy(g.nodes)
    g.located["/s3/out"] = next(i for i, n in enumerate(proto.graph.node) if n.output[0] == "/s3/out")
    typer = propagate.Typer(17)
    assert not _typing._forward_types(g, ["/s3/out"], {}, typer, {})
    assert seen == [0]


def _outcome(model: gk.Model, inputs: list[str], outputs: list[str]) -> tuple[str, str]:
    try:
        result = gx.extract_with_report(model, inputs, outputs, observe=False)
    except gk.GraphkitError as err:
        return type(err).__name__, str(err)
    return "ok", result.model.proto.SerializeToString().hex()


def equivalence_cases(count: int, seed: int) -> Iterator[tuple[gk.Model, list[str], list[str]]]:
    """Mutated fixtures (tests/fuzzing.py's mutations) that load, with cuts across their graphs."""
    import fuzzing

    rng = random.Random(seed)
    files = fuzzing.fixture_files()
    for _ in range(count):
        data, _ = fuzzing.mutate(rng.choice(files).read_bytes(), rng)
        try:
            model = _io.load_bytes(data)
        except gk.GraphkitError:
            continue
        produced = [o for n in model.graph.node for o in n.output if o]
        if not produced or len(set(produced)) != len(produced):
            continue  # (two producers of one name: see _scan_cut, either may be the one kept)
        graph_inputs = [v.name for v in model.graph.input]
        yield model, graph_inputs, [produced[-1]]
        if len(produced) >= 2:
            a, b = sorted(rng.sample(range(len(produced)), 2))
            yield model, [produced[a]], [produced[b]]


def test_fast_and_general_paths_agree_on_mutated_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """On broken and odd models too (but for a name made by two nodes), the fast paths end exactly
    as the general ones: the same error with the same message, or byte-identical models."""
    compared = 0
    for model, inputs, outputs in equivalence_cases(600, seed=8):
        fast = _outcome(model, inputs, outputs)
        with monkeypatch.context() as m:
            m.setattr(gx, "_scan_cut", lambda *a: None)
            m.setattr(_typing, "_propagated_types", lambda *a: None)
            slow = _outcome(model, inputs, outputs)
        assert fast == slow, (inputs, outputs, fast[:2], slow[:2])
        compared += 1
    assert compared > 400, compared


# ------------------------------------------------------------------------------ the paused collector


def test_extraction_holds_the_garbage_collector_off_and_restores_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from graphkit._graph import paused_gc

    seen: list[bool] = []
    real = gx._scan_cut
    monkeypatch.setattr(gx, "_scan_cut", lambda *a: (seen.append(gc.isenabled()), real(*a))[1])
    model = _chain_model()
    assert gc.isenabled()
    gk.extract(model, ["/s1/out"], ["/s3/out"])
    assert seen == [False] and gc.isenabled()
    with pytest.raises(gk.TensorNotFoundError):
        gk.extract(model, ["/s1/outt"], ["/s3/out"])
    assert gc.isenabled()  # (restored on error too)
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the outer pause still holds)
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # (a collector the caller turned off stays off)
    finally:
        gc.enable()


def test_concurrent_extractions_leave_the_collector_on() -> None:
    import gc
    import threading

    model = _chain_model()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                gk.extract(model, ["/s1/out"], ["/s3/out"])
        except BaseException as err:  # (reported below)
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and gc.isenabled()
