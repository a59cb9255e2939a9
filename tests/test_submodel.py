"""The sub-model builder (graphkit._submodel): one metadata policy, whichever verb cuts the model.

The same cut (x -> r) made by extract, by split (its first fragment) and by compare (a capture
fragment) must carry the same fields; merge joins two cuts back with the same policy.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphkit as gk
from graphkit import _submodel

compare_module = importlib.import_module("graphkit._compare")


def _annotated_model() -> gk.Model:
    """x -> local::Outer (calls local::Twice) -> h -> Relu -> r -> Neg -> y, with every field set."""
    twice = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    outer = helper.make_function("local", "Outer", ["a"], ["b"],
                                 [helper.make_node("Twice", ["a"], ["t"], domain="local"),
                                  helper.make_node("Abs", ["t"], ["b"])],
                                 [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    unused = helper.make_function("local", "Unused", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])],
                                  [helper.make_opsetid("", 17)])
    nodes = [
        helper.make_node("Outer", ["x"], ["h"], name="outer", domain="local"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Neg", ["r"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes, "annotated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        value_info=[helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3]),
                    helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3])],
        doc_string="the graph's doc",
    )
    for tensor in ("h", "r"):
        annotation = graph.quantization_annotation.add()
        annotation.tensor_name = tensor
        entry = annotation.quant_parameter_tensor_names.add()
        entry.key, entry.value = "SCALE_TENSOR", f"{tensor}_scale"
    proto = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1),
                              helper.make_opsetid("ai.onnx.ml", 3)],
        functions=[twice, outer, unused], producer_name="maker", producer_version="2", doc_string="the model's doc",
        model_version=7, domain="org.example",
    )
    proto.ir_version = 9
    helper.set_model_props(proto, {"author": "me", "license": "MIT"})
    return gk.Model(proto)


def _cuts(model: gk.Model) -> dict[str, onnx.ModelProto]:
    """The cut x -> r made by each verb."""
    graph = compare_module._Graph.of(model, ("my", "Debug", "name"))
    fragment = compare_module._fragment_model(graph, [0, 1], {"x": np.zeros((2, 3), np.float32)}, ["r"])
    return {
        "extract": gk.extract(model, ["x"], ["r"]).proto,
        "split": gk.split(model, at=["r"])[0].model.proto,
        "compare": fragment.proto,
    }


@pytest.fixture(scope="module")
def cuts() -> dict[str, onnx.ModelProto]:
    return _cuts(_annotated_model())


@pytest.fixture(scope="module")
def merged() -> onnx.ModelProto:
    model = _annotated_model()
    head, tail = gk.extract(model, ["x"], ["r"]), gk.extract(model, ["r"], ["y"])
    return gk.merge(head, tail, {"r": "r"}).proto


def test_every_verb_keeps_the_ir_version(cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto) -> None:
    assert {verb: p.ir_version for verb, p in cuts.items()} == dict.fromkeys(cuts, 9)
    assert merged.ir_version == 9


def test_every_verb_imports_the_opsets_actually_used(cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto) -> None:
    for verb, proto in [*cuts.items(), ("merge", merged)]:
        assert {o.domain: o.version for o in proto.opset_import} == {"": 17, "local": 1}, verb  # (ml unused)


def test_every_verb_keeps_producer_domain_version_and_doc_strings(
    cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto
) -> None:
    for verb, proto in [*cuts.items(), ("merge", merged)]:
        fields = (proto.producer_name, proto.producer_version, proto.domain, proto.model_version, proto.doc_string)
        assert fields == ("maker", "2", "org.example", 7, "the model's doc"), verb
    for verb, proto in cuts.items():
        assert proto.graph.doc_string == "the graph's doc", verb


def test_every_verb_keeps_metadata_and_split_adds_only_its_fragment_entry(
    cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto
) -> None:
    props = {verb: {p.key: p.value for p in proto.metadata_props} for verb, proto in [*cuts.items(), ("merge", merged)]}
    source = {"author": "me", "license": "MIT"}
    assert props["extract"] == props["compare"] == props["merge"] == source
    assert props["split"] == {**source, "graphkit.split": "fragment 0 of 2 of model 'annotated'"}


def test_every_verb_keeps_the_quantization_annotations_of_kept_tensors(
    cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto
) -> None:
    for verb, proto in cuts.items():
        assert [q.tensor_name for q in proto.graph.quantization_annotation] == ["h", "r"], verb
    assert [q.tensor_name for q in merged.graph.quantization_annotation] == ["h", "r"]


def test_every_verb_keeps_the_value_info_of_kept_inner_tensors(cuts: dict[str, onnx.ModelProto]) -> None:
    for verb, proto in cuts.items():
        assert [v.name for v in proto.graph.value_info] == ["h"], verb  # (r is an output: typed there)


def test_every_verb_keeps_exactly_the_functions_used(cuts: dict[str, onnx.ModelProto], merged: onnx.ModelProto) -> None:
    for verb, proto in [*cuts.items(), ("merge", merged)]:
        assert sorted(f.name for f in proto.functions) == ["Outer", "Twice"], verb  # Twice: through Outer


def test_the_same_cut_gives_the_same_fields_whichever_verb_made_it(cuts: dict[str, onnx.ModelProto]) -> None:
    def fields(proto: onnx.ModelProto) -> bytes:
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        copy.ClearField("graph")
        del copy.metadata_props[:]
        return copy.SerializeToString(deterministic=True)

    assert fields(cuts["extract"]) == fields(cuts["split"]) == fields(cuts["compare"])


def test_the_cuts_run_and_match_the_source() -> None:
    model = _annotated_model()
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    want = gk.run(model, {"x": x}, outputs=["r"])["r"]
    for verb, proto in _cuts(model).items():
        got = gk.run(gk.Model(proto), {"x": x}, outputs=["r"])["r"]
        np.testing.assert_array_equal(got, want, err_msg=verb)


def test_used_functions_follow_calls_through_bodies() -> None:
    model = _annotated_model()
    body = helper.make_graph([helper.make_node("Outer", ["x"], ["z"], domain="local")], "body", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["o"], then_branch=body, else_branch=body)], "g",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [])
    names = [f.name for f in _submodel.used_functions(list(model.proto.functions), graph)]
    assert sorted(names) == ["Outer", "Twice"]
