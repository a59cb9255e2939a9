"""extract and expose: exact cuts, proven by values; every error names the tensor and the node."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture

import graphkit as gk
from graphkit import _ort
from graphkit._extract import TensorType, parse_tensor_spec

C12 = "/convs1/convs1.2/Conv_output_0"
C21 = "/convs2/convs2.1/Conv_output_0"
C31 = "/convs3/convs3.1/Conv_output_0"
C40 = "/convs4/convs4.0/Conv_output_0"


def reference(model: gk.Model, tensors: list[str], feeds: dict[str, np.ndarray] | None = None,
              shapes: dict[str, list[int]] | None = None) -> dict[str, np.ndarray]:
    """Run the whole model with ``tensors`` exposed; return every graph input and output by name."""
    exposed = gk.expose(model, [t for t in tensors if t not in {i.name for i in model.graph.input}])
    feeds = gk.make_feeds(exposed, feeds, feed_options=gk.FeedOptions(seed=7, shapes=shapes or {}))
    values = gk.run(exposed, feeds)
    return {**feeds, **values}


def assert_same_values(source: gk.Model, part: gk.Model) -> None:
    """Feed the part the source's values of its inputs; its outputs must equal the source's."""
    names = [v.name for v in part.graph.input] + [v.name for v in part.graph.output]
    ref = reference(source, names)
    inits = {t.name for t in part.graph.initializer}
    feeds = {v.name: ref[v.name] for v in part.graph.input if v.name not in inits}
    got = gk.run(part, feeds)
    assert set(got) == {v.name for v in part.graph.output}
    for name, value in got.items():
        np.testing.assert_allclose(value, ref[name], rtol=1e-5, atol=1e-6, err_msg=name)


def node_names(model: gk.Model) -> list[str]:
    return [n.name for n in model.graph.node]


# ------------------------------------------------------------------------------- the seed's cases


def test_extract_middle_of_whole_model(whole_model: gk.Model) -> None:
    report = gk.extract_with_report(whole_model, [C12], [C40])
    part = report.model
    assert node_names(part) == [
        "/convs2/convs2.0/Conv", "/convs2/convs2.1/Conv", "/convs3/convs3.0/Conv", "/convs3/convs3.1/Conv",
        "/Add", "/convs4/convs4.0/Conv",
    ]
    assert [v.name for v in part.graph.input] == [C12]
    assert [v.name for v in part.graph.output] == [C40]
    assert report.inputs[0].shape == [1, 3, 14, 14] and report.inputs[0].dtype == "float32"
    assert report.outputs[0].shape == [1, 3, 8, 8]
    assert report.unused_inputs == ()
    assert {t.name for t in part.graph.initializer} == {
        f"{m}.{k}" for m in ("convs2.0", "convs2.1", "convs3.0", "convs3.1", "convs4.0") for k in ("weight", "bias")
    }
    assert report.weight_bytes == 5 * (3 * 3 * 3 * 3 + 3) * 4
    assert_same_values(whole_model, part)


def test_extract_an_extra_output_beside_the_final_one(whole_model: gk.Model) -> None:
    part = gk.extract(whole_model, [C12], ["output", C21])
    assert [v.name for v in part.graph.output] == ["output", C21]
    assert len(part.graph.node) == 8
    assert_same_values(whole_model, part)


def test_extract_keeps_a_redundant_input_and_reports_it_unused(whole_model: gk.Model) -> None:
    report = gk.extract_with_report(whole_model, ["input.1", C12], [C40])
    assert [v.name for v in report.model.graph.input] == ["input.1", C12]
    assert report.unused_inputs == ("input.1",)
    assert len(report.model.graph.node) == 6  # the trunk before C12 is not pulled in
    assert_same_values(whole_model, report.model)


def test_extract_insufficient_inputs_names_the_leak(whole_model: gk.Model) -> None:
    before = whole_model.serialized()
    with pytest.raises(gk.OpenCutError) as info:
        gk.extract(whole_model, [C21], ["output"])
    err = info.value
    assert "cannot compute 'output'" in err.message
    assert "node '/Add' (Add)" in err.message
    assert repr(C31) in err.message and "'input.1'" in err.message
    assert err.hint is not None and f"add {C31!r} to inputs" in err.hint and repr(C12) in err.hint
    assert f"add {C31!r} to --inputs" in (err.cli_hint or "") and repr(C12) in (err.cli_hint or "")
    assert whole_model.serialized() == before


def test_extract_inputs_downstream_of_the_output_name_the_graph_input(whole_model: gk.Model) -> None:
    with pytest.raises(gk.OpenCutError) as info:
        gk.extract(whole_model, [C40], [C21])
    assert "node '/convs1/convs1.0/Conv' (Conv) reads 'input.1'" in info.value.message
    assert "none of the given inputs lies upstream" in info.value.message
    assert info.value.hint == "add 'input.1' to inputs" and info.value.cli_hint == "add 'input.1' to --inputs"


@pytest.mark.parametrize("flag, inputs, outputs", [
    ("inputs", ["/convs1/convs1.2/Conv_outptu_0"], ["output"]),
    ("outputs", [C12], ["/convs4/convs4.0/Conv_ouput_0"]),
])
def test_extract_unknown_names_get_did_you_mean(whole_model: gk.Model, flag: str, inputs: list[str],
                                                outputs: list[str]) -> None:
    with pytest.raises(gk.TensorNotFoundError) as info:
        gk.extract(whole_model, inputs, outputs)
    bad = (inputs + outputs)[0 if flag == "inputs" else -1]
    assert repr(bad) in info.value.message and f"(in {flag})" in info.value.message
    assert info.value.hint is not None and "did you mean" in info.value.hint
    assert isinstance(info.value, KeyError)


def test_extract_a_name_given_twice_is_a_usage_error(whole_model: gk.Model) -> None:
    with pytest.raises(gk.UsageError, match="given twice"):
        gk.extract(whole_model, [C12, C12], [C40])


def test_extract_defaults_to_the_model_inputs_and_outputs(whole_model: gk.Model) -> None:
    head = gk.extract(whole_model, outputs=[C21])
    assert [v.name for v in head.graph.input] == ["input.1"]
    tail = gk.extract(whole_model, inputs=["/Add_output_0"])
    assert [v.name for v in tail.graph.output] == ["output"] and len(tail.graph.node) == 3
    assert_same_values(whole_model, head)
    assert_same_values(whole_model, tail)


def test_extract_an_initializer_as_input(whole_model: gk.Model) -> None:
    part = gk.extract(whole_model, [C12, "convs2.0.weight"], [C21])
    assert "convs2.0.weight" not in {t.name for t in part.graph.initializer}
    assert [v.name for v in part.graph.input] == [C12, "convs2.0.weight"]
    assert part.graph.input[1].type.tensor_type.shape.dim[0].dim_value == 3
    assert_same_values(whole_model, part)


def test_extract_is_pure(whole_model: gk.Model) -> None:
    before = whole_model.serialized()
    gk.extract(whole_model, [C12], [C40])
    assert whole_model.serialized() == before


# ----------------------------------------------------------------------------------- subgraphs


def test_extract_if_brings_every_outer_tensor_its_bodies_read() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))
    part = gk.extract(model, ["x_relu", "x_neg", "cond"], ["y"])
    assert node_names(part) == ["branch", "final"]
    # W and zero are read by the else body, W2 only by the If nested inside it
    assert {t.name for t in part.graph.initializer} == {"W", "W2", "zero"}
    assert_same_values(model, part)


def test_extract_loop_and_scan_bring_their_outer_reads() -> None:
    model = gk.load(fixture("loop_scan.onnx"))
    part = gk.extract(model, ["x_abs", "x"], ["y", "scan_state"])
    assert node_names(part) == ["loop", "scan", "final"]
    assert {"step", "trip", "keep_going", "acc0", "state0"} == {t.name for t in part.graph.initializer}
    assert_same_values(model, part)


def test_extract_loop_body_outer_read_counts_as_an_input() -> None:
    model = gk.load(fixture("loop_scan.onnx"))
    part = gk.extract(model, ["x_abs"], ["loop_acc"])
    assert node_names(part) == ["loop"]
    assert_same_values(model, part)
    with pytest.raises(gk.OpenCutError) as info:
        gk.extract(model, ["state0"], ["scan_rows"])
    assert "node 'scan' (Scan)" in info.value.message


def test_extract_refuses_tensors_inside_bodies_naming_the_node() -> None:
    model = gk.load(fixture("loop_scan.onnx"))
    with pytest.raises(gk.TensorNotFoundError) as info:
        gk.extract(model, ["x"], ["delta"])
    assert "'delta'" in info.value.message and "node 'loop' (Loop)" in info.value.message
    assert info.value.hint


# ------------------------------------------------------------------------------------- typing


def test_boundaries_typed_from_value_info_then_inference() -> None:
    model = gk.load(fixture("dcn.onnx"))
    report = gk.extract_with_report(model, ["input", "/conv1/Conv_output_0"], ["output"])
    assert report.typed_by == {"input": "model", "/conv1/Conv_output_0": "model", "output": "model"}
    whole = gk.load(fixture("whole_model.onnx"))
    assert gk.extract_with_report(whole, [C12], [C40]).typed_by == {C12: "inference", C40: "inference"}


def _contrib_model(batch: str | int = "batch") -> gk.Model:
    b = gk.GraphBuilder("contrib")
    b.input("x", "float32", [batch, 4])
    h = b.node("Gelu", ["x"], name="gelu", outputs=["h"], domain="com.microsoft")
    b.node("Relu", [h], name="relu", outputs=["y"])
    b.output("y", "float32", [batch, 4])
    return b.build()


def test_boundaries_shape_inference_cannot_type_are_observed_in_onnx_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ort, "symbolic_shapes", lambda proto: None)  # (as without sympy)
    model = _contrib_model()
    report = gk.extract_with_report(model, ["h"], ["y"])
    assert report.typed_by["h"] == "runtime"
    assert report.inputs[0].dtype == "float32"
    # One run proves no size: every dim is symbolic, with a fresh name.
    assert report.inputs[0].shape == ["unk_1", "unk_2"]
    assert_same_values(model, report.model)


def test_boundaries_onnx_cannot_type_are_typed_by_onnx_runtimes_symbolic_inference() -> None:
    pytest.importorskip("sympy")
    model = _contrib_model()
    report = gk.extract_with_report(model, ["h"], ["y"])
    assert report.typed_by["h"] == "inference"
    assert report.inputs[0].shape == ["batch", 4]


def test_custom_ops_nothing_can_type_ask_the_user_for_the_type() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    with pytest.raises(gk.UsageError) as info:
        gk.extract(model, ["/Debug_1_output_0"], ["/convs.2/Conv_output_0"])
    assert "'/Debug_1_output_0'" in info.value.message and "node '/Debug_1' (my::Debug)" in info.value.message
    assert info.value.cli_hint and "--inputs '/Debug_1_output_0:float32:[" in info.value.cli_hint
    assert "types={'/Debug_1_output_0': ('float32', [" in (info.value.hint or "")
    part = gk.extract(model, ["/Debug_1_output_0"], ["/convs.2/Conv_output_0"],
                      types={"/Debug_1_output_0": ("float32", [1, 3, 10, 10])})
    assert node_names(part) == ["/convs.2/Conv"]
    # reference: the same model with the debug markers as Identity
    plain = model.copy()
    for node in plain.graph.node:
        if node.op_type == "Debug":
            node.op_type, node.domain = "Identity", ""
            del node.attribute[:]
    assert_same_values(gk.Model(plain.proto), part)


def test_user_types_take_precedence(whole_model: gk.Model) -> None:
    report = gk.extract_with_report(whole_model, [C12], [C40], types={C12: TensorType("float32", ("n", 3, 14, 14))})
    assert report.typed_by[C12] == "user" and report.inputs[0].shape == ["n", 3, 14, 14]


def test_parse_tensor_spec() -> None:
    assert parse_tensor_spec("x:0") == ("x:0", None)
    assert parse_tensor_spec("a:float32") == ("a", TensorType("float32", None))
    assert parse_tensor_spec("a:b:int64:[1, batch, ?]") == ("a:b", TensorType("int64", (1, "batch", None)))
    assert parse_tensor_spec("w:float16", known=["w:float16"]) == ("w:float16", None)
    with pytest.raises(gk.UsageError, match="dims"):
        parse_tensor_spec("a:float32:[1,2x]")


# ------------------------------------------------------------------------------------ faithful


FAITHFUL = """
<ir_version: 8, opset_import: ["" : 17, "local" : 1], producer_name: "maker", producer_version: "2.1",
 doc_string: "the model", model_version: 3>
g (float[2] x) => (float[2] y) <float[2] a, float[2] b> {
  a = local.Twice(x)
  b = Relu(a)
  y = local.Thrice(b)
}
<domain: "local", opset_import: ["" : 17]>
Twice (t) => (u) { u = Add(t, t) }
<domain: "local", opset_import: ["" : 17]>
Thrice (t) => (u) { s = Add(t, t)  u = Add(s, t) }
"""


def test_extract_is_faithful_to_everything_it_keeps() -> None:
    model = gk.parse_model(FAITHFUL)
    entry = model.proto.metadata_props.add()
    entry.key, entry.value = "author", "someone"
    model.proto.graph.doc_string = "graph doc"
    part = gk.extract(model, ["x"], ["b"])
    p = part.proto
    assert (p.ir_version, p.producer_name, p.producer_version, p.doc_string, p.model_version) == (
        8, "maker", "2.1", "the model", 3)
    assert {(o.domain, o.version) for o in p.opset_import} == {("", 17), ("local", 1)}
    assert {(m.key, m.value) for m in p.metadata_props} == {("author", "someone")}
    assert p.graph.doc_string == "graph doc"
    assert [f.name for f in p.functions] == ["Twice"]  # Thrice is no longer used
    assert [v.name for v in p.graph.value_info] == ["a"]  # b became an output
    assert_same_values(model, part)


def test_unsorted_source_gives_a_sorted_part() -> None:
    model = gk.load(fixture("whole_model.onnx")).copy()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    report = gk.extract_with_report(model, [C12], [C40], check=True)
    names = node_names(report.model)
    assert names.index("/convs4/convs4.0/Conv") == len(names) - 1
    assert any("sorted" in n for n in report.notes)


# ------------------------------------------------------------------------------ external weights


def test_extract_writes_only_the_weights_it_keeps(ext_copy: Path, tmp_path: Path) -> None:
    model = gk.load(ext_copy)
    report = gk.extract_with_report(model, ["/relu/Relu_output_0"], ["y"])
    assert report.weight_bytes == (128 * 16 + 16) * 4
    saved = gk.save(report.model, tmp_path / "part.onnx")
    data = tmp_path / "part.data"
    assert data.is_file() and data.stat().st_size < (ext_copy.parent / "model.data").stat().st_size / 3
    again = gk.load(tmp_path / "part.onnx")
    assert {t.name for t in again.graph.initializer} == {"fc2.weight", "fc2.bias"}
    ref = reference(model, ["/relu/Relu_output_0"], shapes={"x": [2, 64]})
    got = gk.run(again, {"/relu/Relu_output_0": ref["/relu/Relu_output_0"]})["y"]
    np.testing.assert_allclose(got, ref["y"], rtol=1e-6)
    assert saved.path == tmp_path / "part.onnx"


# ---------------------------------------------------------------------------------------- expose


def test_expose_adds_typed_outputs_and_changes_nothing_else(whole_model: gk.Model) -> None:
    report = gk.expose_with_report(whole_model, [C21, "/Add_output_0"])
    out = report.model
    assert [v.name for v in out.graph.output] == ["output", C21, "/Add_output_0"]
    assert [s.shape for s in report.added] == [[1, 3, 10, 10], [1, 3, 10, 10]]
    same = onnx.ModelProto()
    same.CopyFrom(out.proto)
    del same.graph.output[1:]
    assert same == whole_model.proto
    feeds = gk.make_feeds(whole_model, feed_options=gk.FeedOptions(seed=1))
    np.testing.assert_allclose(gk.run(out, feeds)["output"], gk.run(whole_model, feeds)["output"], rtol=1e-5, atol=1e-6)


def test_expose_all_and_op_types(whole_model: gk.Model) -> None:
    every = gk.expose_with_report(whole_model, all_tensors=True)
    assert len(every.model.graph.output) == len(whole_model.graph.node)
    assert every.already_outputs == ("output",)
    adds = gk.expose(whole_model, op_types=["Add"])
    assert [v.name for v in adds.graph.output] == ["output", "/Add_output_0"]
    with pytest.raises(gk.NameNotFoundError) as info:
        gk.expose(whole_model, op_types=["Addd"])
    assert "'Addd'" in info.value.message and info.value.hint and "'Add'" in info.value.hint


def test_expose_refuses_tensors_inside_bodies() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))
    with pytest.raises(gk.TensorNotFoundError) as info:
        gk.expose(model, ["w_pos"])
    assert "node 'branch' (If)" in info.value.message and "cannot output" in info.value.message
    assert info.value.hint and "'if_out'" in info.value.hint


def test_expose_unknown_tensor_did_you_mean(whole_model: gk.Model) -> None:
    with pytest.raises(gk.TensorNotFoundError) as info:
        gk.expose(whole_model, ["/Add_outptu_0"])
    assert info.value.hint and "'/Add_output_0'" in info.value.hint


# ------------------------------------------------------------- which checker runs on the result


def test_inferred_boundaries_get_the_plain_checker(whole_model: gk.Model, checker_calls: list[bool]) -> None:
    calls = checker_calls
    report = gk.extract_with_report(whole_model, [C12], [C40])
    assert report.typed_by == {C12: "inference", C40: "inference"}
    assert calls == [False]  # strict inference would re-derive the source's own types
    assert_same_values(whole_model, report.model)


def test_stated_boundary_types_get_the_full_checker(whole_model: gk.Model, checker_calls: list[bool]) -> None:
    calls = checker_calls
    gk.extract(whole_model, [C12], [C40], types={C12: ("float32", [1, 3, 14, 14])})
    assert calls == [True]
    value_info = gk.load(fixture("dcn.onnx"))
    calls.clear()
    gk.extract(value_info, ["input", "/conv1/Conv_output_0"], ["output"])  # the source's value_info types one
    assert calls == [True]


def test_expose_gets_the_same_checker_choice(whole_model: gk.Model, checker_calls: list[bool]) -> None:
    calls = checker_calls
    assert gk.expose_with_report(whole_model, [C21]).typed_by == {C21: "inference"}
    assert calls == [False]
    calls.clear()
    gk.expose(whole_model, [C21], types={C21: ("float32", [1, 3, 10, 10])})
    assert calls == [True]


def test_expose_explains_a_broken_source_only_when_something_fails(whole_model: gk.Model,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    gx_module = importlib.import_module("graphkit._extract")
    sound: list[str] = []
    real = gx_module.require_sound
    monkeypatch.setattr(gx_module, "require_sound", lambda m, **k: (sound.append(m.name), real(m, **k))[1])
    gk.expose(whole_model, [C21])
    assert sound == []  # (the result's check proves the source sound: same graph, more outputs)
    broken = onnx.ModelProto()
    broken.CopyFrom(whole_model.proto)
    broken.graph.node[1].input[0] = "nowhere"
    with pytest.raises(gk.InvalidModelError) as info:
        gk.expose(gk.Model(broken), [C21])
    assert len(sound) == 1 and "'nowhere'" in info.value.message
    with pytest.raises(gk.InvalidModelError):
        gk.expose(gk.Model(broken), [C21], check=False)  # (nothing checks the result: checked first)
    assert len(sound) == 2


def test_a_user_type_the_nodes_contradict_is_refused(whole_model: gk.Model, tmp_path: Path) -> None:
    with pytest.raises(gk.InvalidModelError) as info:
        gk.extract(whole_model, [C12], [C40], types={C12: ("int64", [1, 3, 14, 14])})
    assert info.value.hint
    assert not list(tmp_path.iterdir())


_VALUE_READERS = """
<ir_version: 8, opset_import: ["" : 17]>
agraph (float[1, 2, 4, 4] x) => (float[1, 2, 8, 8] out_r, float[N] out_q)
<float[4] scales = {1.0, 1.0, 2.0, 2.0}, float[8] bias = {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5},
 float start = {0.0}, float limit = {6.0}, float delta = {1.5}, int64[2] shape = {-1, 8}>
{
    r = Resize <mode = "nearest"> (x, , scales)
    a = Add (r, bias)
    out_r = Relu (a)
    q = Range (start, limit, delta)
    flat = Reshape (out_r, shape)
    s = Shape (flat)
    out_q = Mul (q, q)
}
"""


def test_cut_inputs_are_typed_from_float_values_shape_inference_reads() -> None:
    """Resize scales, Range bounds and Reshape shapes keep their values for inference; plain float
    weights lose theirs (their type is all inference needs) and the types stay those of full inference."""
    model = gk.parse_model(_VALUE_READERS)
    full = onnx.shape_inference.infer_shapes(model.proto, data_prop=True)
    expected = {v.name: v.type for v in full.graph.value_info}
    report = gk.extract_with_report(model, ["a", "q", "flat"], ["out_r", "out_q", "s"])
    for name in ("a", "q", "flat"):
        assert report.typed_by[name] == "inference"
        got = next(v.type for v in report.model.graph.input if v.name == name)
        assert got == expected[name], name
    assert [d.dim_value for d in expected["a"].tensor_type.shape.dim] == [1, 2, 8, 8]
    assert [d.dim_value for d in expected["q"].tensor_type.shape.dim] == [4]
    assert_same_values(model, report.model)
