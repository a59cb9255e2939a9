"""Lazy loading: large inline weights stay in the model file, are read from it, and saved back inline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import digest, fixture

import graphkit as gk
from graphkit import _io as io
from graphkit._model import BORROWED_KEY, is_borrowed


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "LAZY_TENSOR_MIN", 256)
    monkeypatch.setattr(io, "LAZY_FILE_MIN", 1024)


def _srcnn() -> Path:
    return fixture("srcnn.onnx")


def test_lazy_load_leaves_large_weights_in_the_file(small_thresholds: None) -> None:
    lazy = gk.load(_srcnn())
    full = gk.load(_srcnn(), lazy=False)
    borrowed = [t.name for t in lazy.lazy_proto.graph.initializer if is_borrowed(t)]
    assert borrowed == ["conv1.weight", "conv1.bias", "conv2.weight", "conv3.weight"]  # 64 floats and up
    assert all(not t.raw_data for t in lazy.lazy_proto.graph.initializer if is_borrowed(t))
    for a, b in zip(lazy.graph.initializer, full.graph.initializer):
        np.testing.assert_array_equal(gk.tensor_value(lazy, a), gk.tensor_value(full, b))
    feeds = gk.make_feeds(full, feed_options=gk.FeedOptions(seed=2))
    np.testing.assert_array_equal(gk.run(lazy, feeds)["output"], gk.run(full, feeds)["output"])
    assert gk.validate(lazy).passed


def test_lazy_model_saves_inline_as_it_was(small_thresholds: None, tmp_path: Path) -> None:
    before = digest(_srcnn())
    saved = gk.save(gk.load(_srcnn()), tmp_path / "copy.onnx")
    assert not (tmp_path / "copy.data").exists()
    assert gk.load(tmp_path / "copy.onnx", lazy=False).proto == gk.load(_srcnn(), lazy=False).proto
    assert all(t.location == "copy.onnx" for t in _refs(saved))  # the returned model reads the copy
    assert digest(_srcnn()) == before
    external = gk.save(gk.load(_srcnn()), tmp_path / "ext.onnx", external=True, size_threshold=0)
    assert (tmp_path / "ext.data").is_file()
    assert not any(e.key == BORROWED_KEY for t in external.lazy_proto.graph.initializer for e in t.metadata_props)
    assert not any(is_borrowed(t) for t in io.inline_proto(gk.load(_srcnn())).graph.initializer)


def _refs(model: gk.Model) -> list[io.ExternalRef]:
    return [io.external_ref(model, t) for t in model.lazy_proto.graph.initializer if is_borrowed(t)]


def test_extract_from_a_lazy_model_writes_only_kept_weights(small_thresholds: None, tmp_path: Path) -> None:
    model = gk.load(_srcnn())
    part = gk.extract(model, ["/relu_1/Relu_output_0"], ["output"])
    gk.save(part, tmp_path / "tail.onnx")
    again = gk.load(tmp_path / "tail.onnx", lazy=False)
    assert {t.name for t in again.graph.initializer} == {"conv3.weight", "conv3.bias"}
    assert (tmp_path / "tail.onnx").stat().st_size < 32 * 3 * 5 * 5 * 4 + 2048
    full = gk.load(_srcnn(), lazy=False)
    exposed = gk.expose(full, ["/relu_1/Relu_output_0"])
    ref = gk.run(exposed, feed_options=gk.FeedOptions(seed=4))
    got = gk.run(again, {"/relu_1/Relu_output_0": ref["/relu_1/Relu_output_0"]})["output"]
    np.testing.assert_allclose(got, ref["output"], rtol=1e-5, atol=1e-6)


def test_lazy_load_of_a_truncated_file_is_a_corrupt_model(small_thresholds: None, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(_srcnn().read_bytes()[:-5000])
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(bad)
    assert str(bad) in info.value.message and info.value.hint


def test_small_files_are_parsed_whole(tmp_path: Path) -> None:
    model = gk.load(_srcnn())
    assert not any(is_borrowed(t) for t in model.lazy_proto.graph.initializer)
    assert onnx.TensorProto.EXTERNAL not in {t.data_location for t in model.graph.initializer}


# ------------------------------------------------------------------------ what the writer left


def test_explicit_default_data_location_is_inline_data_and_loads_lazily(small_thresholds: None, tmp_path: Path) -> None:
    proto = onnx.load(str(_srcnn()))
    for tensor in proto.graph.initializer:
        tensor.data_location = onnx.TensorProto.DEFAULT  # explicit, as onnx leaves it after loading external data
    path = tmp_path / "explicit.onnx"
    path.write_bytes(proto.SerializeToString())
    assert path.read_bytes() != _srcnn().read_bytes()
    lazy = gk.load(path)
    borrowed = [t.name for t in lazy.lazy_proto.graph.initializer if is_borrowed(t)]
    assert borrowed == ["conv1.weight", "conv1.bias", "conv2.weight", "conv3.weight"]
    assert not lazy.has_external_data
    full = gk.load(_srcnn(), lazy=False)
    for a, b in zip(lazy.lazy_proto.graph.initializer, full.lazy_proto.graph.initializer):
        np.testing.assert_array_equal(gk.tensor_value(lazy, a), gk.tensor_value(full, b))
    assert gk.summarize(lazy).external_files == []


# ------------------------------------------------------------------- bounded work on hostile files


def _counted_varints(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the scan's Python steps (one varint read per field header, at least)."""
    calls = [0]
    real = io._varint

    def counting(buf: bytes, pos: int) -> tuple[int, int]:
        calls[0] += 1
        return real(buf, pos)

    monkeypatch.setattr(io, "_varint", counting)
    return calls


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_lazy_scan_fails_fast_on_an_initializer_longer_than_the_file(small_thresholds: None, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    filler = (b"\x0d" + b"\0\0\x80\x3f") * 40_000  # 40,000 well-formed fields a runaway walk would step through
    graph = _varint(5 << 3 | 2) + _varint(2**40) + filler  # an initializer claiming a terabyte
    path = tmp_path / "liar.onnx"
    path.write_bytes(b"\x08\x08" + _field(7, graph))
    calls = _counted_varints(monkeypatch)
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(path)
    assert str(path) in info.value.message and "initializer" in info.value.message and info.value.hint
    assert calls[0] < 20


def _unpacked_floats_model(count: int, graph_name: str = "g") -> bytes:
    """A valid model whose one initializer holds ``count`` floats as unpacked float_data fields."""
    values = np.arange(count, dtype=np.float32)
    tensor = _varint(1 << 3) + _varint(count) + b"\x10\x01" + _field(8, b"w")
    tensor += b"".join(b"\x25" + v.tobytes() for v in values)  # field 4, wire type 5, one per value
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "w"], ["y"])], graph_name,
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [count])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [count])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    graph_bytes = model.graph.SerializeToString() + _field(5, tensor)
    model.ClearField("graph")
    return model.SerializeToString() + _field(7, graph_bytes)


def test_lazy_scan_of_unpacked_values_takes_a_few_steps_not_one_per_value(small_thresholds: None, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "unpacked.onnx"
    path.write_bytes(_unpacked_floats_model(50_000))
    calls = _counted_varints(monkeypatch)
    model = gk.load(path)
    assert calls[0] < 100
    np.testing.assert_array_equal(gk.tensor_value(model, model.graph.initializer[0]), np.arange(50_000, dtype=np.float32))
    assert onnx.load(str(path)) == model.proto


def test_a_model_of_mostly_typed_values_is_checked_by_a_walk_not_the_strict_parse(
        small_thresholds: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    strict_parses = []
    real = io._strict_parse
    monkeypatch.setattr(io, "_strict_parse", lambda data: strict_parses.append(len(data)) or real(data))
    path = tmp_path / "unpacked.onnx"
    path.write_bytes(_unpacked_floats_model(50_000))
    gk.load(path)
    assert strict_parses == []
    gk.load(_srcnn())  # (raw weights: borrowed, and the rest parsed strictly)
    assert len(strict_parses) == 1
    bad = tmp_path / "bad_name.onnx"
    bad.write_bytes(_unpacked_floats_model(50_000, graph_name="gg").replace(b"\x12\x02gg", b"\x12\x02\xff\xfe", 1))
    with pytest.raises(gk.CorruptModelError, match="UTF-8"):
        gk.load(bad)


def test_lazy_scan_refuses_a_field_longer_than_its_message(small_thresholds: None, tmp_path: Path) -> None:
    path = tmp_path / "long_field.onnx"
    path.write_bytes(b"\x08\x08" + _varint(2 << 3 | 2) + _varint(2**33) + b"\0" * 2048)  # producer_name: 8 GiB
    with pytest.raises(gk.CorruptModelError, match="runs past the end"):
        gk.load(path)


# ------------------------------------------------------------------------------------ symlinks


def test_lazy_model_reached_through_a_symlink_is_not_an_escape(small_thresholds: None, tmp_path: Path) -> None:
    store, view = tmp_path / "store", tmp_path / "view"
    store.mkdir()
    view.mkdir()
    (store / "srcnn.onnx").write_bytes(_srcnn().read_bytes())
    link = view / "model.onnx"
    link.symlink_to(store / "srcnn.onnx")
    model = gk.load(link)
    assert any(is_borrowed(t) for t in model.lazy_proto.graph.initializer)
    full = gk.load(_srcnn(), lazy=False)
    feeds = gk.make_feeds(full, feed_options=gk.FeedOptions(seed=3))
    np.testing.assert_array_equal(gk.run(model, feeds)["output"], gk.run(full, feeds)["output"])
    assert gk.validate(model).passed
    saved = gk.save(model, tmp_path / "copy.onnx")
    assert gk.load(saved.path, lazy=False).proto == full.proto
    assert model.proto == full.proto


def test_borrowed_weights_are_not_read_from_a_file_that_changed(small_thresholds: None, tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(_srcnn().read_bytes())
    model = gk.load(path)
    borrowed = next(t for t in model.lazy_proto.graph.initializer if is_borrowed(t))
    data = bytearray(path.read_bytes())
    data[-200:] = bytes(200)  # another model of the same size in its place
    path.write_bytes(bytes(data))
    with pytest.raises(gk.ExternalDataError, match="changed since the model was loaded") as info:
        gk.tensor_value(model, borrowed)
    assert "load the model again" in (info.value.hint or "")
    with pytest.raises(gk.ExternalDataError, match="changed since"):
        gk.save(model, tmp_path / "copy.onnx")
    with pytest.raises(gk.ExternalDataError, match="changed since"):
        model.proto  # noqa: B018
