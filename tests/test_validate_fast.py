"""The cheap paths of validate/check_or_raise and save find exactly what the detailed paths find.

validate() and check_or_raise() run onnx.checker first and skip graphkit's detailed structural pass
when a few C-level facts prove it would find nothing; save() writes a model without external data
from one serialization. Each case below is a problem the detailed pass reports: the fast path must
report it with the same code and message (for the checker-caught ones, because the checker fails;
for the others, because the residual checks catch them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from conftest import fixture
from onnx import TensorProto
from onnx import helper as h

import graphkit as gk
from graphkit._model import Model, has_external_data, outline

V = importlib.import_module("graphkit._validate")


def _base() -> onnx.ModelProto:
    return gk.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) <float[2] w = {1.0, 2.0}> { a = Add (x, w)
        b = Relu (a)
        y = Mul (b, w) }"""
    ).copy().proto


def _with_if(body_read: str = "x") -> onnx.ModelProto:
    then = h.make_graph([h.make_node("Identity", [body_read], ["t"], name="inner")], "then", [],
                        [h.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), h.make_node("Cast", ["s"], ["c"], to=TensorProto.BOOL),
             h.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _then(proto: onnx.ModelProto) -> onnx.GraphProto:
    return next(a.g for a in proto.graph.node[2].attribute if a.name == "then_branch")


def _raw(values: bytes, count: int, name: str) -> onnx.TensorProto:
    tensor = h.make_tensor(name, TensorProto.FLOAT, [count], b"\0" * (4 * count), raw=True)
    tensor.raw_data = values
    return tensor


def _dangling(p: onnx.ModelProto) -> None:
    p.graph.node[1].input[0] = "ghost"


def _unsorted(p: onnx.ModelProto) -> None:
    nodes = list(p.graph.node)
    nodes[0], nodes[1] = nodes[1], nodes[0]
    del p.graph.node[:]
    p.graph.node.extend(nodes)


def _duplicate_producer(p: onnx.ModelProto) -> None:
    p.graph.node[1].output[0] = "a"


def _dangling_output(p: onnx.ModelProto) -> None:
    p.graph.output[0].name = "nowhere"


def _unknown_domain(p: onnx.ModelProto) -> None:
    p.graph.node[1].domain = "com.nobody"


def _raw_too_long(p: onnx.ModelProto) -> None:  # onnx.checker only rejects raw data that is too short
    p.graph.initializer[0].ClearField("float_data")
    p.graph.initializer[0].raw_data = b"\0" * 12


def _raw_too_short(p: onnx.ModelProto) -> None:
    p.graph.initializer[0].ClearField("float_data")
    p.graph.initializer[0].raw_data = b"\0" * 7


def _negative_dims_hidden_in_size(p: onnx.ModelProto) -> None:  # (-1) x (-2) x 4 bytes = 8 bytes: sizes agree
    w = p.graph.initializer[0]
    w.ClearField("float_data")
    del w.dims[:]
    w.dims.extend([-1, -2])
    w.raw_data = b"\0" * 8


def _typed_too_long(p: onnx.ModelProto) -> None:  # onnx.checker only rejects typed data that is too short
    p.graph.initializer[0].float_data.append(3.0)


def _absurd_input(p: onnx.ModelProto) -> None:
    p.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -3


def _absurd_value_info(p: onnx.ModelProto) -> None:
    p.graph.value_info.append(h.make_tensor_value_info("a", TensorProto.FLOAT, [2**30, 2**30]))


def _only_ai_onnx_imported(p: onnx.ModelProto) -> None:  # onnx.checker accepts "" nodes then
    del p.opset_import[:]
    p.opset_import.append(h.make_opsetid("ai.onnx", 17))


BROKEN: dict[str, tuple[Callable[[onnx.ModelProto], None], str, bool]] = {
    # case: (how to break the model, the code graphkit reports, whether onnx.checker rejects it too)
    "dangling input": (_dangling, "dangling-input", True),
    "unsorted": (_unsorted, "unsorted", True),
    "duplicate producer": (_duplicate_producer, "duplicate-producer", True),
    "dangling output": (_dangling_output, "dangling-output", True),
    "unknown domain": (_unknown_domain, "missing-opset-import", True),
    "raw data too short": (_raw_too_short, "initializer-size", True),
    "raw data too long": (_raw_too_long, "initializer-size", False),
    "negative dims, right size": (_negative_dims_hidden_in_size, "initializer-size", True),
    "typed data too long": (_typed_too_long, "initializer-size", False),
    "absurd input shape": (_absurd_input, "absurd-shape", False),
    "absurd value_info": (_absurd_value_info, "absurd-shape", False),
    "only ai.onnx imported": (_only_ai_onnx_imported, "missing-opset-import", False),
}


def _detailed(model: Model, full_check: bool = True) -> gk.Report:
    """The report of the detailed path (graphkit's every check, then the checker's message)."""
    message = V.run_checker(model, full_check=full_check)
    return V._report(model, message, "passed" if message is None else "failed")


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_each_problem_is_still_reported_the_same_way(case: str) -> None:
    breaker, code, checker_rejects = BROKEN[case]
    proto = _base()
    breaker(proto)
    model = Model(proto)
    assert (V.run_checker(model, full_check=False) is not None) == checker_rejects  # (what the C checker catches)
    for full_check in (False, True):
        report = gk.validate(model, full_check=full_check)
        assert report == _detailed(model, full_check)
        assert code in [i.code for i in report.errors]
        with pytest.raises(gk.InvalidModelError) as info:
            V.check_or_raise(model, what="the result", full_check=full_check)
        first = report.errors[:3]
        assert str(info.value).startswith("the result would be invalid: " + "; ".join(i.message for i in first))
        assert info.value.hint


def test_if_body_problems_are_still_reported() -> None:
    outer_read = Model(_with_if("ghost"))  # a body reading an outer-scope name nothing defines
    assert V.run_checker(outer_read, full_check=False) is not None
    report = gk.validate(outer_read, full_check=False)
    assert report == _detailed(outer_read, False)
    issue = next(i for i in report.errors if i.code == "dangling-input")
    assert issue.tensor == "ghost" and "branch" in issue.graph
    with pytest.raises(gk.InvalidModelError, match="ghost"):
        V.check_or_raise(outer_read, full_check=False)

    long_raw = _with_if()  # raw data too long in a body initializer: only graphkit sees it
    _then(long_raw).initializer.append(_raw(b"\0" * 16, 3, "bw"))
    _then(long_raw).node[0].input[0] = "bw"
    model = Model(long_raw)
    assert V.run_checker(model, full_check=False) is None
    report = gk.validate(model, full_check=False)
    assert report == _detailed(model, False)
    assert [i.code for i in report.errors] == ["initializer-size"] and report.errors[0].tensor == "bw"
    with pytest.raises(gk.InvalidModelError, match="'bw'"):
        V.check_or_raise(model, full_check=False)


@pytest.mark.parametrize("case", ["unused initializer", "unused input", "duplicate node name", "clean"])
def test_warnings_are_listed_as_by_the_detailed_pass(case: str) -> None:
    proto = _base()
    if case == "unused initializer":
        proto.graph.initializer.append(h.make_tensor("spare", TensorProto.FLOAT, [1], [0.0]))
    elif case == "unused input":
        proto.graph.input.append(h.make_tensor_value_info("extra", TensorProto.FLOAT, [1]))
    elif case == "duplicate node name":
        proto.graph.node[0].name = proto.graph.node[1].name = "twin"
    model = Model(proto)
    report = gk.validate(model)
    assert report == _detailed(model)
    assert report.passed and report.checker == "passed"
    assert len(report.warnings) == (0 if case == "clean" else 1)
    V.check_or_raise(model)  # (warnings do not stop a write)


@pytest.mark.parametrize("name", ["whole_model.onnx", "if_outer_scope.onnx", "loop_scan.onnx", "linear_func.onnx",
                                  "ext_weights/model.onnx", "dcn.onnx", "my_add.onnx"])
def test_fixtures_get_the_detailed_report(name: str) -> None:
    model = gk.load(fixture(name))
    assert gk.validate(model) == _detailed(model)
    assert gk.validate(model, full_check=False) == _detailed(model, False)


def test_outline_never_misses_external_data(ext_copy: Path) -> None:
    external = gk.load(ext_copy)
    assert has_external_data(external.proto) and outline(external.proto.SerializeToString()).has_external_data
    inline = _base()
    assert not outline(inline.SerializeToString()).has_external_data

    in_body = _with_if()  # a Constant's tensor attribute in an If body, stored externally
    tensor = h.make_tensor("c", TensorProto.FLOAT, [1], [0.0])
    tensor.data_location = TensorProto.EXTERNAL
    _then(in_body).node.append(h.make_node("Constant", [], ["k"], value=tensor))
    assert has_external_data(in_body) and outline(in_body.SerializeToString()).has_external_data

    no_location = _base()  # external without a location entry: there is no "location" in the bytes
    no_location.graph.initializer[0].data_location = TensorProto.EXTERNAL
    assert b"location" not in no_location.SerializeToString()
    assert outline(no_location.SerializeToString()).has_external_data


def test_outline_facts() -> None:
    proto = _with_if()
    proto.graph.node[0].domain = "com.a"
    _then(proto).node[0].domain = "com.b"
    facts = outline(proto.SerializeToString())
    assert facts.main_has_bodies and facts.node_domains == {"com.a", "com.b"}
    assert facts.main_node_names == ["branch"] and facts.main_node_inputs == {"x", "s", "c"}
    plain = outline(_base().SerializeToString())
    assert not plain.main_has_bodies and plain.main_initializer_names == {"w"}


def test_save_inline_writes_the_same_bytes_and_owns_its_proto(tmp_path: Path) -> None:
    model = gk.load(fixture("whole_model.onnx"))
    saved = gk.save(model, tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx").read_bytes() == model.proto.SerializeToString()
    assert saved.proto is not model.proto and saved.proto == model.proto and saved.path == tmp_path / "out.onnx"
    saved.proto.graph.name = "changed"
    assert model.proto.graph.name != "changed"
    assert [p.name for p in tmp_path.iterdir()] == ["out.onnx"]  # (no temporary file left)


def test_save_refuses_an_external_tensor_without_location(tmp_path: Path) -> None:
    proto = _base()
    proto.graph.initializer[0].data_location = TensorProto.EXTERNAL
    with pytest.raises(gk.ExternalDataError, match=r"'w'.*no location"):
        gk.save(Model(proto, tmp_path), tmp_path / "out.onnx")
    assert list(tmp_path.iterdir()) == []
