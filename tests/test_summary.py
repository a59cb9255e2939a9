"""graphkit._summary: what ``inspect`` reports, from the structure alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import fixture
from onnx import TensorProto, helper, numpy_helper

import graphkit as gk
from graphkit._summary import TensorSig, dtype_name, shape_of, summarize


def _model() -> gk.Model:
    """Two inputs (one of them an initializer listed as an input), a Loop, a custom op, a function."""
    body = helper.make_graph(
        [helper.make_node("Add", ["state", "one"], ["next"]), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("next", TensorProto.FLOAT, [2])],
        initializer=[numpy_helper.from_array(np.ones(2, np.float32), "one")],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Relu", ["r"], ["r2"], name="relu2"),
        helper.make_node("Mul", ["r2", "scale"], ["m"], name="mul"),
        helper.make_node("Loop", ["trips", "", "m"], ["looped"], name="loop", body=body),
        helper.make_node("Debug", ["looped"], ["d"], name="debug", domain="my"),
        helper.make_node("Twice", ["d"], ["y"], name="call", domain="local"),
    ]
    twice = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        nodes, "summary_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])],
        initializer=[numpy_helper.from_array(np.full(2, 3, np.float32), "scale"),
                     numpy_helper.from_array(np.array(2, np.int64), "trips")],
    )
    proto = helper.make_model(
        graph, functions=[twice], producer_name="tests", doc_string="for inspect",
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my", 1), helper.make_opsetid("local", 1)],
    )
    helper.set_model_props(proto, {"author": "graphkit tests"})
    return gk.Model(proto)


def test_summary_reports_structure_counts_and_metadata() -> None:
    summary = summarize(_model())
    assert summary.graph_name == "summary_model"
    assert summary.opsets == {"ai.onnx": 17, "my": 1, "local": 1}
    assert (summary.producer, summary.doc_string, summary.metadata) == ("tests", "for inspect", {"author": "graphkit tests"})
    assert summary.inputs == [TensorSig("x", "float32", ["batch", 2])]  # 'scale' is an initializer, not an input
    assert summary.outputs == [TensorSig("y", "float32", ["batch", None])]
    assert summary.node_count == 8  # six in the main graph, two in the Loop body
    assert summary.op_types == {"Relu": 2, "Add": 1, "Mul": 1, "Loop": 1, "Identity": 1, "my::Debug": 1, "local::Twice": 1}
    assert next(iter(summary.op_types)) == "Relu"  # most common first
    assert summary.subgraphs == ["node 'loop'.body (2 nodes)"]
    assert summary.custom_domains == ["local", "my"]
    assert summary.functions == ["local::Twice"]
    assert (summary.initializer_count, summary.initializer_bytes) == (3, 8 + 8 + 8)  # the body's 'one' included
    assert (summary.external_bytes, summary.external_files) == (0, [])


def test_summary_of_external_weights_names_the_data_file_and_its_bytes() -> None:
    summary = summarize(gk.load(fixture("ext_weights/model.onnx")))
    assert summary.external_files == ["model.data"]
    assert summary.external_bytes == summary.initializer_bytes == 41536
    assert summary.initializer_count == 4
    assert summary.inputs == [TensorSig("x", "float32", ["batch", 64])]
    assert summary.metadata == {"note": "weights live in model.data"}


def test_summary_to_dict_is_json_ready() -> None:
    data = json.loads(json.dumps(summarize(_model()).to_dict()))
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 2]}]
    assert data["op_types"]["Relu"] == 2


def test_tensor_sig_of_non_tensor_and_unranked_values() -> None:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    unranked = helper.make_tensor_value_info("u", TensorProto.INT64, None)
    assert TensorSig.of(seq) == TensorSig("s", "sequence(float32)", None)  # named by its elements
    assert TensorSig.of(unranked) == TensorSig("u", "int64", None)
    assert TensorSig.of(unranked).shape_text() == "[unranked]"
    assert TensorSig("t", "float32", [1, "n", None]).shape_text() == "[1, n, ?]"


def test_shape_of_gives_sizes_names_and_none_for_unknown_dims() -> None:
    value = helper.make_tensor_value_info("v", TensorProto.FLOAT, [3, "seq", None])
    assert shape_of(value) == [3, "seq", None]
    assert shape_of(helper.make_tensor_value_info("w", TensorProto.FLOAT, None)) is None
    assert shape_of(helper.make_tensor_value_info("scalar", TensorProto.FLOAT, [])) == []


def test_dtype_name_uses_numpy_names_and_never_fails() -> None:
    assert dtype_name(TensorProto.FLOAT) == "float32"
    assert dtype_name(TensorProto.INT64) == "int64"
    assert dtype_name(TensorProto.BOOL) == "bool"
    assert dtype_name(TensorProto.UNDEFINED) == "unknown"
    assert dtype_name(TensorProto.STRING) == "object"
    assert dtype_name(999) == "999"


def test_summarize_reads_no_weight(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    (ext_copy.parent / "model.data").unlink()  # nothing left to read: the summary comes from the graph
    summary = summarize(model)
    assert (summary.external_files, summary.external_bytes) == (["model.data"], 41536)


def test_summary_of_a_model_saved_with_every_tensor_external_counts_what_load_read_in(tmp_path: Path) -> None:
    """load reads the shape constants in (under 1 KiB each); the file keeps them on disk all the same."""
    from conftest import flatten_export, save_every_tensor_external

    source = save_every_tensor_external(flatten_export(), tmp_path)
    summary = gk.summarize(gk.load(source))
    assert summary.external_files == ["x.data"]
    assert summary.external_bytes == summary.initializer_bytes == sum(len(t.raw_data) for t in flatten_export().graph.initializer)
