"""load/save: weights stay on disk, go with the model, never escape its folder; writes are atomic."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import FIXTURES, digest, fixture, flatten_export, folder_digest, save_every_tensor_external
from onnx import numpy_helper

import graphkit as gk
from graphkit import _io as io


def _external_locations(model: gk.Model) -> set[str]:
    return {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}


def test_load_leaves_external_weights_on_disk(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    assert model.base_dir == ext_copy.parent.resolve()
    weights = [t for t in model.graph.initializer if io.tensor_nbytes(t) >= io.SMALL_EXTERNAL]
    assert weights and all(t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data for t in weights)
    assert _external_locations(model) == {"model.data"}


def test_tensor_value_reads_external_data(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    weight = next(t for t in model.graph.initializer if t.name == "fc1.weight")
    value = gk.tensor_value(model, weight)
    assert value.shape == (64, 128) and value.dtype == np.float32


def test_model_saved_to_another_folder_keeps_working(ext_copy: Path, tmp_path: Path) -> None:
    model = gk.load(ext_copy)
    expected = gk.run(model, feed_options=gk.FeedOptions(seed=3, shapes={"x": [2, 64]}))["y"]
    elsewhere = tmp_path / "elsewhere" / "deep"
    elsewhere.mkdir(parents=True)
    saved = gk.save(model, elsewhere / "copy.onnx")
    assert (elsewhere / "copy.data").is_file()
    shutil.rmtree(ext_copy.parent)  # the original weights are gone: the copy must not need them
    again = gk.load(elsewhere / "copy.onnx")
    assert _external_locations(again) == {"copy.data"}
    np.testing.assert_array_equal(gk.run(again, feed_options=gk.FeedOptions(seed=3, shapes={"x": [2, 64]}))["y"], expected)
    assert saved.path == elsewhere / "copy.onnx"


def test_save_inline_then_external_round_trip(ext_copy: Path, tmp_path: Path) -> None:
    model = gk.load(ext_copy)
    gk.save(model, tmp_path / "inline.onnx", external=False)
    inline = gk.load(tmp_path / "inline.onnx")
    assert not inline.has_external_data
    assert not (tmp_path / "inline.data").exists()
    gk.save(inline, tmp_path / "ext.onnx", external=True, size_threshold=0)
    back = gk.load(tmp_path / "ext.onnx")
    for a, b in zip(inline.graph.initializer, back.graph.initializer):
        np.testing.assert_array_equal(gk.tensor_value(inline, a), gk.tensor_value(back, b))


def test_metadata_and_everything_else_survive_a_round_trip(tmp_path: Path) -> None:
    model = gk.load(fixture("whole_model.onnx")).copy()
    proto = model.proto
    proto.doc_string = "a doc"
    proto.producer_version = "9.9"
    proto.model_version = 7
    entry = proto.metadata_props.add()
    entry.key, entry.value = "author", "someone"
    proto.graph.value_info.append(onnx.helper.make_tensor_value_info("/Add_output_0", 1, [1, 3, 10, 10]))
    func = onnx.helper.make_function("local", "Twice", ["x"], ["y"], [onnx.helper.make_node("Add", ["x", "x"], ["y"])],
                                     [onnx.helper.make_opsetid("", 17)])
    proto.functions.append(func)
    proto.opset_import.append(onnx.helper.make_opsetid("local", 1))
    gk.save(model, tmp_path / "m.onnx")
    again = gk.load(tmp_path / "m.onnx")
    assert again.proto == proto


def test_small_models_stay_single_file(tmp_path: Path) -> None:
    gk.save(gk.load(fixture("whole_model.onnx")), tmp_path / "w.onnx")
    assert [p.name for p in tmp_path.iterdir()] == ["w.onnx"]


def test_model_too_large_for_protobuf_is_saved_external(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "INLINE_LIMIT", 1000)
    saved = gk.save(gk.load(fixture("whole_model.onnx")), tmp_path / "w.onnx", size_threshold=100)
    assert (tmp_path / "w.data").is_file()
    assert not saved.has_external_data  # (as it loads: tensors this small are read in)
    assert gk.Model(onnx.load(str(tmp_path / "w.onnx"), load_external_data=False)).has_external_data


@pytest.mark.parametrize("location", ["../x.data", "sub/../../x.data", "/etc/passwd"])
def test_location_escaping_the_folder_is_refused(ext_copy: Path, location: str) -> None:
    proto = onnx.load(str(ext_copy), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = location
    onnx.save(proto, str(ext_copy))
    with pytest.raises(gk.UnsafePathError) as info:
        gk.load(ext_copy)
    assert location in str(info.value) and "fc1.weight" in str(info.value)
    assert info.value.hint


def test_symlink_out_of_the_folder_is_refused(ext_copy: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\0" * 100_000)
    (ext_copy.parent / "model.data").unlink()
    os.symlink(secret, ext_copy.parent / "model.data")
    with pytest.raises(gk.UnsafePathError, match="outside"):
        gk.load(ext_copy)


def test_missing_and_truncated_external_data(ext_copy: Path) -> None:
    data = ext_copy.parent / "model.data"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(gk.ExternalDataError, match=r"model\.data"):
        gk.load(ext_copy)
    data.unlink()
    with pytest.raises(gk.ExternalDataError, match="missing"):
        gk.load(ext_copy)


@pytest.mark.parametrize(
    ("content", "error", "words"),
    [
        (b"", gk.CorruptModelError, "empty"),
        (b"\xff\xfe not protobuf at all \x00\x01", gk.CorruptModelError, "not"),
        (b"hello world, plain text", gk.CorruptModelError, "not"),
    ],
)
def test_unreadable_files_are_clear_errors(tmp_path: Path, content: bytes, error: type, words: str) -> None:
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(error, match=words) as info:
        gk.load(path)
    assert str(path) in str(info.value)


def test_truncated_model_is_a_clear_error(tmp_path: Path) -> None:
    data = fixture("whole_model.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(gk.CorruptModelError):
        gk.load(path)


def test_missing_path_and_folder(tmp_path: Path) -> None:
    with pytest.raises(gk.ModelNotFoundError, match="no such file"):
        gk.load(tmp_path / "nope.onnx")
    with pytest.raises(FileNotFoundError):  # still a FileNotFoundError for callers
        gk.load(tmp_path / "nope.onnx")
    with pytest.raises(gk.ModelNotFoundError, match="not a file"):
        gk.load(tmp_path)


def test_failed_save_leaves_no_output_no_temp_and_input_untouched(ext_copy: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    before = folder_digest(ext_copy.parent)
    model = gk.load(ext_copy)
    out = tmp_path / "out"
    out.mkdir()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io, "_write_proto", broken)
    with pytest.raises(gk.WriteError, match="disk is full"):
        gk.save(model, out / "m.onnx")
    assert list(out.iterdir()) == []
    assert folder_digest(ext_copy.parent) == before


def test_failed_save_keeps_the_previous_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.onnx"
    gk.save(gk.load(fixture("linear_func.onnx")), target)
    previous = digest(target)
    monkeypatch.setattr(io, "_write_proto", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        gk.save(gk.load(fixture("whole_model.onnx")), target)
    assert digest(target) == previous
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_save_into_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(gk.WriteError, match="does not exist"):
        gk.save(gk.load(fixture("linear_func.onnx")), tmp_path / "no" / "m.onnx")


def test_save_location_cannot_escape(tmp_path: Path, ext_copy: Path) -> None:
    with pytest.raises(gk.UnsafePathError):
        gk.save(gk.load(ext_copy), tmp_path / "m.onnx", location="../evil.data")


def test_save_over_own_data_file_in_place(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    expected = gk.run(model, feed_options=gk.FeedOptions(seed=1, shapes={"x": [1, 64]}))["y"]
    gk.save(model, ext_copy)  # same folder, same data file name: read fully before replaced
    np.testing.assert_array_equal(gk.run(gk.load(ext_copy), feed_options=gk.FeedOptions(seed=1, shapes={"x": [1, 64]}))["y"], expected)


def test_shared_external_tensors_are_written_once(tmp_path: Path, ext_copy: Path) -> None:
    proto = onnx.load(str(ext_copy), load_external_data=False)
    dup = onnx.TensorProto()
    dup.CopyFrom(proto.graph.initializer[0])
    dup.name = "fc1.weight.alias"
    proto.graph.initializer.append(dup)
    onnx.save(proto, str(ext_copy))
    gk.save(gk.load(ext_copy), tmp_path / "m.onnx")
    assert (tmp_path / "m.data").stat().st_size <= (ext_copy.parent / "model.data").stat().st_size + 4096 * 4


def test_input_file_is_never_modified_by_load_and_save(tmp_path: Path) -> None:
    before = folder_digest(FIXTURES)
    for path in FIXTURES.rglob("*.onnx"):
        gk.save(gk.load(path), tmp_path / path.name)
    assert folder_digest(FIXTURES) == before


def _named_model(node_name: str) -> bytes:
    proto = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Relu", ["x"], ["y"], name=node_name)],
            "g",
            [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])],
        )
    )
    return proto.SerializeToString()


def test_a_name_that_is_not_utf8_is_a_corrupt_model(tmp_path: Path) -> None:
    data = _named_model("nodeA").replace(b"nodeA", b"node\xff")
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(path)
    assert "bad.onnx" in info.value.message and "a node's name" in info.value.message
    assert "UTF-8" in info.value.message and info.value.hint


def test_non_utf8_bytes_where_onnx_allows_bytes_load(tmp_path: Path) -> None:
    proto = onnx.ModelProto()
    proto.ParseFromString(_named_model("relu"))
    tensor = onnx.helper.make_tensor("s", onnx.TensorProto.STRING, [2], [b"\xff\xfe", b"ok"])
    proto.graph.initializer.append(tensor)
    proto.graph.node[0].doc_string = "naïve, but valid UTF-8"
    path = tmp_path / "strings.onnx"
    path.write_bytes(proto.SerializeToString())
    model = gk.load(path)
    assert list(model.graph.initializer[0].string_data) == [b"\xff\xfe", b"ok"]
    assert model.graph.node[0].doc_string == "naïve, but valid UTF-8"


def _external_names(path: Path) -> dict[str, str]:
    """Initializer name -> external-data location, as the file says."""
    proto = onnx.load(str(path), load_external_data=False)
    return {t.name: {e.key: e.value for e in t.external_data}["location"]
            for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}


def test_load_reads_small_external_tensors_in_and_leaves_weights_on_disk(tmp_path: Path) -> None:
    source = save_every_tensor_external(flatten_export(), tmp_path / "src")
    assert len(_external_names(source)) == 6  # (what exporters that write every initializer externally give)
    model = gk.load(source)
    tensors = {t.name: t for t in model.graph.initializer}
    assert {n for n, t in tensors.items() if t.data_location == onnx.TensorProto.EXTERNAL} == {"conv.weight", "fc.weight"}
    np.testing.assert_array_equal(gk.tensor_value(model, tensors["minus_one"]), [-1])
    out = tmp_path / "out" / "copy.onnx"
    out.parent.mkdir()
    gk.save(model, out)
    onnx.checker.check_model(str(out), full_check=True)  # (the full check cannot read a shape from external data)
    assert _external_names(out) == {"conv.weight": "copy.data", "fc.weight": "copy.data"}
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(gk.run(gk.load(out), feeds)["y"], gk.run(gk.Model(flatten_export()), feeds)["y"])


def test_save_writes_small_external_tensors_inline_unless_told_otherwise(tmp_path: Path) -> None:
    source = save_every_tensor_external(flatten_export(), tmp_path / "src")
    model = gk.Model(onnx.load(str(source), load_external_data=False), source.parent)  # (not through load)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    gk.save(model, out)
    onnx.checker.check_model(str(out), full_check=True)
    assert _external_names(out) == {"conv.weight": "m.data", "fc.weight": "m.data"}
    every = tmp_path / "every" / "m.onnx"
    every.parent.mkdir()
    gk.save(model, every, external=True, size_threshold=0)
    assert set(_external_names(every)) == {t.name for t in flatten_export().graph.initializer}
    small_only = gk.Model(onnx.load(str(source), load_external_data=False), source.parent)
    for tensor in small_only.lazy_proto.graph.initializer:
        if tensor.name in ("conv.weight", "fc.weight"):
            tensor.CopyFrom(numpy_helper.from_array(gk.tensor_value(model, tensor), tensor.name))
    inline = tmp_path / "inline" / "m.onnx"
    inline.parent.mkdir()
    gk.save(small_only, inline)
    assert _external_names(inline) == {} and not (inline.parent / "m.data").exists()  # (no empty data file)


def test_small_external_tensors_of_a_model_not_from_load_reach_onnx_runtime(tmp_path: Path) -> None:
    """ONNX Runtime cannot read an Unsqueeze's axes from external data: the bytes it gets hold them."""
    source = save_every_tensor_external(flatten_export(), tmp_path / "src")
    model = gk.Model(onnx.load(str(source), load_external_data=False), source.parent)
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    expected = gk.run(gk.Model(flatten_export()), feeds)["y"]
    np.testing.assert_array_equal(gk.run(model, feeds)["y"], expected)
    (tmp_path / "out").mkdir()
    saved = gk.save(gk.Model(flatten_export()), tmp_path / "out" / "m.onnx", external=True, size_threshold=0)
    assert set(_external_names(tmp_path / "out" / "m.onnx")) == {"conv.weight", "axes", "minus_one", "fc.weight", "fc.bias"}
    held = {t.name for t in saved.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL}
    assert held == {"zero", "axes", "minus_one", "fc.bias"}  # (as it loads)
    np.testing.assert_array_equal(gk.run(saved, feeds)["y"], expected)
