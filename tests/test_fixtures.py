"""The bundled fixtures are exactly what make_fixtures.py writes, valid, and small."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import FIXTURES, folder_digest

import graphkit as gk


def _make_fixtures_module():
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fixtures_regenerate_byte_identical(tmp_path: Path) -> None:
    _make_fixtures_module().write_all(tmp_path)
    fresh = {k: v for k, v in folder_digest(tmp_path).items()}
    committed = {k: v for k, v in folder_digest(FIXTURES).items() if k.endswith((".onnx", ".data"))}
    assert fresh == committed


def test_fixtures_folder_is_small() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < 5 * 2**20


@pytest.mark.parametrize("path", sorted(FIXTURES.rglob("*.onnx")), ids=lambda p: p.name)
def test_every_fixture_validates(path: Path) -> None:
    report = gk.validate(gk.load(path))
    assert report.passed, report.to_dict()
    assert report.checker == "passed"


def test_whole_model_has_the_seed_tensor_names(whole_model: gk.Model) -> None:
    produced = {o for n in whole_model.graph.node for o in n.output}
    for name in (
        "/convs1/convs1.2/Conv_output_0",
        "/convs2/convs2.1/Conv_output_0",
        "/convs3/convs3.1/Conv_output_0",
        "/convs4/convs4.0/Conv_output_0",
    ):
        assert name in produced
    assert [i.name for i in whole_model.graph.input] == ["input.1"]
    assert len(whole_model.graph.node) == 11


def test_debug_markers_carry_names() -> None:
    model = gk.load(FIXTURES / "debug_markers.onnx")
    debug = [n for n in model.graph.node if n.op_type == "Debug"]
    assert [n.domain for n in debug] == ["my"] * 4
    assert [n.attribute[0].s.decode() for n in debug] == ["x_0", "x_1", "x_2", "x_3"]
    assert any(o.domain == "my" for o in model.proto.opset_import)
