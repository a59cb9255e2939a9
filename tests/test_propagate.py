"""graphkit._propagate: exact types for the simplest ops, or None (never a guess).

The property test comparing it with ONNX shape inference on random graphs is in test_fast_paths.py;
these are its rules one by one, each checked against ONNX shape inference where it types.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphkit import _propagate as propagate
from graphkit._propagate import FastType, Typer, node_type, to_type_proto, type_of

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _onnx_type(op: str, types: list[FastType], **attrs: object) -> FastType | None:
    """What ONNX shape inference gives for the output of ``op`` on inputs of ``types``."""
    names = [f"i{k}" for k in range(len(types))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["out"], **attrs)], "one",
        [helper.make_tensor_value_info(n, t[0], list(t[1])) for n, t in zip(names, types)],
        [helper.make_tensor_value_info("out", 0, None)],
    )
    inferred = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return type_of(inferred.graph.output[0].type)


@pytest.mark.parametrize(
    ("op", "types", "expected"),
    [
        ("Relu", [(F, (2, "n"))], (F, (2, "n"))),
        ("Add", [(F, (2, 3)), (F, (3,))], (F, (2, 3))),
        ("Mul", [(F, ("batch", 1)), (F, (1, 8))], (F, ("batch", 8))),
        ("Sum", [(F, (4, 1)), (F, (1,)), (F, (5,))], (F, (4, 5))),
        ("Greater", [(I64, (2,)), (I64, (2,))], (B, (2,))),
        ("Not", [(B, ("n",))], (B, ("n",))),
        ("Pow", [(F, (3,)), (I64, ())], (F, (3,))),
        ("Add", [(F, ("n",)), (F, (7,))], (F, (7,))),  # a size meets a name: the size
    ],
)
def test_node_type_is_what_onnx_shape_inference_gives(op: str, types: list[FastType], expected: FastType) -> None:
    node = helper.make_node(op, [f"i{k}" for k in range(len(types))], ["out"])
    assert node_type(op, node, types) == expected
    assert _onnx_type(op, types) == expected


def test_cast_takes_its_element_type_from_the_attribute() -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=I64)
    assert node_type("Cast", node, [(F, (2, "n"))]) == (I64, (2, "n"))
    assert _onnx_type("Cast", [(F, (2, "n"))], to=I64) == (I64, (2, "n"))
    assert node_type("Cast", helper.make_node("Cast", ["x"], ["y"]), [(F, (2,))]) is None  # no 'to'


@pytest.mark.parametrize(
    ("op", "types"),
    [
        ("Add", [(F, ("a",)), (F, ("b",))]),  # two dim names meet: ONNX leaves the dim unknown
        ("Add", [(F, (2,)), (F, (3,))]),  # incompatible sizes: left to ONNX's own error
        ("Add", [(F, (2,)), (I64, (2,))]),  # mixed element types: an invalid node
        ("Conv", [(F, (1, 1, 4, 4)), (F, (1, 1, 3, 3))]),  # not an op this module knows
        ("Relu", [(F, (2,)), (F, (2,))]),  # wrong arity
    ],
)
def test_node_type_gives_up_rather_than_guess(op: str, types: list[FastType]) -> None:
    node = helper.make_node(op, [f"i{k}" for k in range(len(types))], ["out"])
    assert node_type(op, node, types) is None


def test_type_of_needs_an_element_type_and_every_dim() -> None:
    assert type_of(helper.make_tensor_type_proto(F, [1, "n"])) == (F, (1, "n"))
    assert type_of(helper.make_tensor_type_proto(F, [])) == (F, ())
    assert type_of(helper.make_tensor_type_proto(F, None)) is None  # unranked
    assert type_of(helper.make_tensor_type_proto(F, [1, None])) is None  # an unknown dim
    assert type_of(helper.make_tensor_type_proto(0, [1])) is None  # no element type
    assert type_of(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [1]))) is None


def test_to_type_proto_and_type_of_round_trip() -> None:
    for t in [(F, (2, "batch", 3)), (I64, ()), (B, ("n",))]:
        assert type_of(to_type_proto(t)) == t


def test_the_typer_supports_an_op_only_where_the_models_opset_defines_it() -> None:
    assert Typer(17).supports("Add", "")
    assert Typer(17).supports("Relu", "ai.onnx")
    assert not Typer(17).supports("Add", "com.microsoft")
    assert not Typer(17).supports("Gelu", "")  # Gelu came with opset 20
    assert Typer(20).supports("Gelu", "")
    assert not Typer(7).supports("Add", "")  # before multidirectional broadcasting everywhere
    assert "Conv" not in propagate.SUPPORTED_OPS


def test_the_typer_runs_steps_in_order_and_stops_at_the_first_it_cannot_type() -> None:
    relu = helper.make_node("Relu", ["x"], ["r"])
    add = helper.make_node("Add", ["r", "b"], ["s"])
    conv = helper.make_node("Conv", ["s", "w"], ["c"])
    types: dict[str, FastType] = {"x": (F, ("n", 4)), "b": (F, (4,))}
    assert Typer(17).run([(relu, "Relu", ["x"], "r"), (add, "Add", ["r", "b"], "s")], types)
    assert types["s"] == (F, ("n", 4))
    assert not Typer(17).run([(conv, "Conv", ["s", "w"], "c")], types)
    assert "c" not in types


def test_the_typer_remembers_each_pattern_once() -> None:
    typer = Typer(17)
    node = helper.make_node("Add", ["a", "b"], ["c"])
    first = typer.output(node, "Add", ((F, (1, 64)), (F, (64,))))
    assert first == (F, (1, 64))
    assert typer.output(node, "Add", ((F, (1, 64)), (F, (64,)))) is first
