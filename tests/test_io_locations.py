"""External-data locations a hostile file may hold: clear errors naming the tensor, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

import graphkit as gk
from graphkit.cli import main


def _model_pointing_at(folder: Path, location: str) -> Path:
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [16], [0.0] * 16)
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        tensor.external_data.add(key=key, value=value)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], [tensor],
    )
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_a_nul_byte_in_a_location_is_refused_by_name(tmp_path: Path) -> None:
    path = _model_pointing_at(tmp_path, "w\0.bin")
    with pytest.raises(gk.UnsafePathError) as info:
        gk.load(path)
    assert "'w'" in info.value.message and "NUL" in info.value.message and str(path) in info.value.message
    assert info.value.hint


@pytest.mark.parametrize("location", ["a" * 300 + ".bin", "d/" + "b" * 256], ids=["file", "folder"])
def test_a_location_with_a_component_over_255_bytes_is_refused_by_name(tmp_path: Path, location: str) -> None:
    path = _model_pointing_at(tmp_path, location)
    with pytest.raises(gk.ExternalDataError) as info:
        gk.load(path)
    assert "'w'" in info.value.message and "over the 255" in info.value.message
    assert len(info.value.message) < 400 and info.value.hint


@pytest.mark.parametrize("location", ["w\0.bin", "c" * 4000], ids=["nul", "long"])
@pytest.mark.parametrize("verb", ["inspect", "check", "run", "diff"])
def test_hostile_locations_are_one_line_errors_on_the_cli(tmp_path: Path, location: str, verb: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = _model_pointing_at(tmp_path, location)
    args = [verb, str(path)] + ([str(path)] if verb == "diff" else [])
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphkit: error: tensor 'w'") and "Traceback" not in err
    assert len(err.splitlines()) == 2 and err.splitlines()[1].startswith("hint: ")


def test_a_symlink_loop_in_a_location_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "loop.bin").symlink_to(tmp_path / "loop.bin")
    with pytest.raises(gk.ExternalDataError, match="'w'"):
        gk.load(_model_pointing_at(tmp_path, "loop.bin"))



@pytest.mark.parametrize("name", ["a" * 300 + ".onnx", "a\0b.onnx"], ids=["long", "nul"])
def test_an_unusable_model_path_is_a_clear_error(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(gk.GraphkitError) as info:  # (a NUL byte: the argument check refuses it first)
        gk.load(tmp_path / name)
    assert info.value.hint and len(info.value.message) < 300
    assert main(["inspect", str(tmp_path / name)]) == 2
    assert "Traceback" not in capsys.readouterr().err
