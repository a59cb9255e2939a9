"""graphkit._graph: the one index over a graph (producers, consumers, reads with subgraph bodies, order)."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphkit._graph import (
    GraphIndex,
    fresh_name,
    node_label,
    position_ref,
    subgraph_outer_reads,
    subgraphs,
    toposort_proto,
)
from graphkit.errors import CycleError


def _vi(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [2])


def _chain() -> onnx.GraphProto:
    """x -> A(Relu) -> a -> B(Add a, w) -> b -> C(Mul a, b) -> y, with initializer w."""
    return helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="A"),
            helper.make_node("Add", ["a", "w"], ["b"], name="B"),
            helper.make_node("Mul", ["a", "b"], ["y"], name="C"),
        ],
        "chain", [_vi("x")], [_vi("y")],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])],
    )


def _body(depth: int) -> onnx.GraphProto:
    """A branch that reads ``p`` from the outer scope ``depth`` levels down (nested If bodies)."""
    out = f"t{depth}"
    if depth == 1:
        return helper.make_graph([helper.make_node("Identity", ["p"], [out])], "then1", [], [_vi(out)])
    inner = _body(depth - 1)
    node = helper.make_node("If", ["c"], [out], then_branch=inner, else_branch=inner, name=f"nested{depth}")
    return helper.make_graph([node], f"then{depth}", [], [_vi(out)])


def _if_reading_outer(depth: int) -> onnx.GraphProto:
    """An If (node 0) whose then-branch reads ``p`` ``depth`` levels down and whose else-branch reads
    ``x``; ``p`` comes from node 1, after it."""
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")])
    return helper.make_graph(
        [
            helper.make_node("If", ["c"], ["z"], then_branch=_body(depth), else_branch=other, name="Branch"),
            helper.make_node("Neg", ["x"], ["p"], name="P"),
        ],
        "outer", [_vi("x"), helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [_vi("z")],
    )


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def test_producers_consumers_and_reads_of_a_chain() -> None:
    index = GraphIndex(_chain())
    assert index.producer == {"a": 0, "b": 1, "y": 2}
    assert index.consumers == {"x": [0], "a": [1, 2], "w": [1], "b": [2]}
    assert index.node_reads == [["x"], ["a", "w"], ["a", "b"]]
    assert (index.inputs, index.outputs, list(index.initializers)) == (["x"], ["y"], ["w"])
    assert index.nodes_by_name == {"A": 0, "B": 1, "C": 2}


def test_node_lookup_by_name_and_by_position() -> None:
    graph = _chain()
    graph.node[2].name = "A"  # a repeated name: every position is listed, the first one answers
    index = GraphIndex(graph)
    assert index.positions_by_name == {"A": [0, 2], "B": [1]}
    assert [index.node_index(ref) for ref in ("A", "B", "#2", 2, "#3", 3, "Z", "#x")] == [0, 1, 2, 2, None, None, None, None]
    assert [position_ref(ref) for ref in ("#0", "#12", "12", "#", "#1a", "A")] == [0, 12, None, None, None, None]


def test_downstream_nodes_follow_readers_bodies_included() -> None:
    index = GraphIndex(_chain())
    assert index.downstream_nodes(["a"]) == {1, 2}
    assert index.downstream_nodes(["b"]) == {2}
    assert index.downstream_nodes(["y", "nowhere"]) == set()
    outer = GraphIndex(_if_reading_outer(depth=2))
    assert outer.downstream_nodes(["x"]) == {0, 1}  # the If reads x from its else-branch; P reads it directly
    assert outer.downstream_nodes(["p"]) == {0}  # read two levels down in the then-branch


def test_defines_counts_inputs_initializers_outputs_and_the_outer_scope() -> None:
    index = GraphIndex(_chain(), outer=frozenset({"from_outside"}))
    assert all(index.defines(n) for n in ("x", "w", "a", "y", "from_outside"))
    assert not index.defines("nowhere")


def test_an_if_reads_what_its_bodies_read_from_outside_at_any_depth() -> None:
    graph = _if_reading_outer(depth=3)
    index = GraphIndex(graph)
    assert set(index.node_reads[0]) == {"c", "p", "x"}  # c: condition; p: three levels down; x: else branch
    assert 0 in index.consumers["p"]
    assert subgraph_outer_reads(_branch(graph.node[0], "then_branch")) == {"c", "p"}


def test_prefix_reads_is_the_union_of_reads_bodies_included() -> None:
    chain, with_if = GraphIndex(_chain()), GraphIndex(_if_reading_outer(depth=2))
    for index in (chain, with_if):
        for stop in range(len(index.nodes) + 1):
            assert index.prefix_reads(stop) == {r for i in range(stop) for r in index.reads(i)}
    assert with_if.prefix_reads(1) == {"c", "p", "x"}


def test_order_rank_position_and_upstream_nodes_of_a_chain() -> None:
    index = GraphIndex(_chain())
    assert index.order == index.topological_order()
    assert index.rank == {i: k for k, i in enumerate(index.order)}
    for name, k in index.position.items():
        assert name in index.nodes[index.order[k]].output
    last = index.nodes[index.order[-1]].output[0]
    assert index.upstream_nodes([last]) == set(range(len(index.nodes)))
    assert index.upstream_nodes([]) == set()


def test_a_body_does_not_read_what_it_defines_itself() -> None:
    body = helper.make_graph(
        [helper.make_node("Neg", ["outer"], ["mine"]), helper.make_node("Abs", ["mine"], ["out"])],
        "body", [_vi("arg")], [_vi("out"), _vi("arg")],
        initializer=[helper.make_tensor("k", TensorProto.FLOAT, [1], [1.0])],
    )
    body.node.append(helper.make_node("Add", ["k", "arg"], ["unused"]))
    assert subgraph_outer_reads(body) == {"outer"}


def test_subgraphs_lists_the_graphs_a_node_holds() -> None:
    graph = _if_reading_outer(depth=1)
    assert sorted(g.name for g in subgraphs(graph.node[0])) == ["else", "then1"]
    assert subgraphs(graph.node[1]) == []


def test_topological_order_keeps_a_valid_order_and_fixes_an_invalid_one() -> None:
    assert GraphIndex(_chain()).topological_order() == [0, 1, 2]
    shuffled = _chain()
    nodes = list(shuffled.node)
    del shuffled.node[:]
    shuffled.node.extend([nodes[2], nodes[0], nodes[1]])  # C, A, B
    assert GraphIndex(shuffled).topological_order() == [1, 2, 0]


def test_topological_order_places_an_if_after_what_its_body_reads() -> None:
    graph = _if_reading_outer(depth=2)  # the If (node 0) reads p, which node 1 produces
    assert GraphIndex(graph).topological_order() == [1, 0]


def test_a_cycle_is_an_error_naming_its_nodes_in_data_flow_order() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "d"], ["a"], name="first"),
            helper.make_node("Relu", ["a"], ["d"], name="second"),
            helper.make_node("Neg", ["a"], ["y"], name="out"),
        ],
        "loop", [_vi("x")], [_vi("y")],
    )
    with pytest.raises(CycleError) as err:
        GraphIndex(graph).topological_order()
    text = str(err.value)
    assert "node 'first' (Add) ['a']" in text and "node 'second' (Relu) ['d']" in text
    assert "'out'" not in text
    assert err.value.hint


def test_node_label_names_the_node_or_its_position_and_custom_domains() -> None:
    assert node_label(helper.make_node("Relu", ["x"], ["y"], name="r")) == "node 'r' (Relu)"
    assert node_label(helper.make_node("Relu", ["x"], ["y"]), 4) == "node #4 (Relu)"
    assert node_label(helper.make_node("Debug", ["x"], ["y"], domain="my")) == "unnamed node (my::Debug)"


def test_toposort_proto_sorts_the_main_graph_bodies_and_local_functions() -> None:
    graph = _if_reading_outer(depth=1)
    then = _branch(graph.node[0], "then_branch")
    then.node.insert(0, helper.make_node("Abs", ["t1"], ["late_out"], name="late"))
    func = helper.make_function(
        "local", "F", ["i"], ["o"],
        [helper.make_node("Neg", ["m"], ["o"], name="f2"), helper.make_node("Abs", ["i"], ["m"], name="f1")],
        [helper.make_opsetid("", 17)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[func])
    toposort_proto(proto)
    assert [n.name for n in proto.graph.node] == ["P", "Branch"]
    assert [n.output[0] for n in _branch(proto.graph.node[1], "then_branch").node] == ["t1", "late_out"]
    assert [n.name for n in proto.functions[0].node] == ["f1", "f2"]


def test_toposort_proto_leaves_a_sorted_graph_as_it_was() -> None:
    proto = helper.make_model(_chain(), opset_imports=[helper.make_opsetid("", 17)])
    before = proto.SerializeToString()
    toposort_proto(proto)
    assert proto.SerializeToString() == before


def test_fresh_name_takes_the_first_free_suffix_and_claims_it() -> None:
    taken = {"w", "w_1"}
    assert [fresh_name("w", taken), fresh_name("w", taken), fresh_name("v", taken)] == ["w_2", "w_3", "v"]
    assert taken == {"w", "w_1", "w_2", "w_3", "v"}
