"""Lazy loading: large inline weights stay in the model file, are read from it, and saved back inline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import digest, fixture

import graphkit as gk
from graphkit import io
from graphkit.model import BORROWED_KEY, is_borrowed


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(io, "LAZY_TENSOR_MIN", 256)
    monkeypatch.setattr(io, "LAZY_FILE_MIN", 1024)


def _srcnn() -> Path:
    return fixture("srcnn.onnx")


def test_lazy_load_leaves_large_weights_in_the_file(small_thresholds: None) -> None:
    lazy = gk.load(_srcnn())
    full = gk.load(_srcnn(), lazy=False)
    borrowed = [t.name for t in lazy.graph.initializer if is_borrowed(t)]
    assert borrowed == ["conv1.weight", "conv1.bias", "conv2.weight", "conv3.weight"]  # 64 floats and up
    assert all(not t.raw_data for t in lazy.graph.initializer if is_borrowed(t))
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
    assert not any(e.key == BORROWED_KEY for t in external.graph.initializer for e in t.metadata_props)
    assert not any(is_borrowed(t) for t in io.inline_proto(gk.load(_srcnn())).graph.initializer)


def _refs(model: gk.Model) -> list[io.ExternalRef]:
    return [io.external_ref(model, t) for t in model.graph.initializer if is_borrowed(t)]


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
    assert not any(is_borrowed(t) for t in model.graph.initializer)
    assert onnx.TensorProto.EXTERNAL not in {t.data_location for t in model.graph.initializer}
