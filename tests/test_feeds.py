"""graphkit._feeds: reading .npy/.npz/.pb feeds, matching them to inputs, parsing flags, saving outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import fixture
from onnx import numpy_helper

import graphkit as gk
from graphkit._feeds import (
    load_feed_file,
    load_feeds,
    parse_range,
    parse_shape,
    read_tensor_file,
    resolve_feeds,
    save_arrays,
)

X = np.arange(12, dtype=np.float32).reshape(3, 4)
Y = np.arange(5, dtype=np.int64)


def _pb(path: Path, value: np.ndarray, name: str = "") -> Path:
    path.write_bytes(numpy_helper.from_array(value, name).SerializeToString())
    return path


def test_npy_is_read_with_the_given_name(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", X)
    (item,) = load_feed_file(tmp_path / "x.npy", "input.1")
    assert item.name == "input.1" and item.stem == "x"
    np.testing.assert_array_equal(item.value, X)


def test_npz_without_name_feeds_every_array_by_key(tmp_path: Path) -> None:
    np.savez(tmp_path / "f.npz", **{"gpu_0/data_0": X, "ids": Y})
    items = load_feeds([str(tmp_path / "f.npz")])
    assert {i.name: i.value.tolist() for i in items} == {"gpu_0/data_0": X.tolist(), "ids": Y.tolist()}


def test_npz_with_name_picks_that_key_or_its_only_array(tmp_path: Path) -> None:
    np.savez(tmp_path / "two.npz", a=X, b=Y)
    (item,) = load_feeds([f"b={tmp_path / 'two.npz'}"])
    assert item.name == "b" and item.value.tolist() == Y.tolist()
    np.savez(tmp_path / "one.npz", whatever=X)
    (item,) = load_feeds([f"x={tmp_path / 'one.npz'}"])
    assert item.name == "x"
    np.testing.assert_array_equal(item.value, X)


def test_npz_without_the_named_key_lists_its_keys(tmp_path: Path) -> None:
    np.savez(tmp_path / "two.npz", alpha=X, beta=Y)
    with pytest.raises(gk.FeedError) as err:
        load_feed_file(tmp_path / "two.npz", "alpa")
    assert "'alpha'" in err.value.message and "'beta'" in err.value.message and "two.npz" in err.value.message
    assert "did you mean 'alpha'" in err.value.hint


def test_tensorproto_pb_keeps_its_name_and_value(tmp_path: Path) -> None:
    (item,) = load_feed_file(_pb(tmp_path / "input_0.pb", Y, "ids"))
    assert item.name == "ids" and item.value.dtype == np.int64
    np.testing.assert_array_equal(item.value, Y)
    assert read_tensor_file(tmp_path / "input_0.pb").name == "ids"


@pytest.mark.parametrize(
    ("filename", "content", "words"),
    [
        ("bad.npy", b"not numpy", "as .npy"),
        ("bad.npz", b"not a zip", "as .npz"),
        ("bad.pb", b"\xff\xff\xff", "TensorProto"),
        ("data.csv", b"1,2,3", "unknown format '.csv'"),
    ],
)
def test_unreadable_feed_files_are_clear_errors(tmp_path: Path, filename: str, content: bytes, words: str) -> None:
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(gk.FeedError) as err:
        load_feed_file(path)
    assert words in err.value.message and filename in err.value.message and err.value.hint


def test_missing_feed_file(tmp_path: Path) -> None:
    with pytest.raises(gk.FeedError) as err:
        load_feeds([f"x={tmp_path / 'nope.npy'}"])
    assert "nope.npy" in err.value.message and "--input" in (err.value.cli_hint or "")


def test_nameless_arrays_are_matched_by_stem_test_data_index_or_single_input(tmp_path: Path) -> None:
    np.save(tmp_path / "b.npy", X)
    _pb(tmp_path / "input_1.pb", Y)
    files = load_feeds([str(tmp_path / "b.npy"), str(tmp_path / "input_1.pb")])
    feeds = resolve_feeds(files, ["a", "ids", "b"])
    assert sorted(feeds) == ["b", "ids"]
    (single,) = load_feeds([str(tmp_path / "b.npy")])
    assert list(resolve_feeds([single], ["only"])) == ["only"]


def test_nameless_array_for_a_multi_input_model_asks_for_a_name(tmp_path: Path) -> None:
    np.save(tmp_path / "data.npy", X)
    with pytest.raises(gk.FeedError) as err:
        resolve_feeds(load_feeds([str(tmp_path / "data.npy")]), ["a", "b"], where="m.onnx")
    assert "data.npy" in err.value.message and "'a', 'b'" in err.value.message
    assert err.value.hint.startswith("write NAME=")


def test_an_input_fed_twice_is_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "f.npz", x=X)
    with pytest.raises(gk.FeedError, match="'x' is fed twice"):
        resolve_feeds(load_feeds([str(tmp_path / "x.npy"), str(tmp_path / "f.npz")]), ["x"])


def test_every_format_feeds_a_real_run(tmp_path: Path) -> None:
    model = gk.load(fixture("linear_func.onnx"))
    a, x, b = (np.full((10, 10), v, np.float32) for v in (2.0, 3.0, 1.0))
    np.save(tmp_path / "a.npy", a)
    np.savez(tmp_path / "xb.npz", x=x, b=b)
    files = load_feeds([f"a={tmp_path / 'a.npy'}", str(tmp_path / "xb.npz")])
    assert gk.run(model, resolve_feeds(files, ["a", "x", "b"]))["output"].tolist() == np.full((10, 10), 7.0).tolist()
    _pb(tmp_path / "x.pb", x, "x")
    files = load_feeds([f"a={tmp_path / 'a.npy'}", str(tmp_path / "x.pb"), f"b={tmp_path / 'xb.npz'}"])
    assert gk.run(model, resolve_feeds(files, ["a", "x", "b"]))["output"][0, 0] == 7.0


def test_parse_shape_and_range() -> None:
    assert parse_shape("in=1x3x20x20") == ("in", (1, 3, 20, 20))
    assert parse_shape("1,3,4") == (None, (1, 3, 4))
    assert parse_shape("scalar=[]") == ("scalar", ())
    assert parse_shape("a=b=[2, 2]") == ("a=b", (2, 2))
    assert parse_range("x=-1,1") == ("x", (-1.0, 1.0))
    with pytest.raises(gk.UsageError) as err:
        parse_shape("in=1xfoo")
    assert "'in=1xfoo'" in err.value.message and "1x3x224x224" in err.value.hint
    with pytest.raises(gk.UsageError, match="lo must be below hi"):
        parse_range("x=2,1")
    with pytest.raises(gk.UsageError, match="has no value"):
        parse_shape("in=")


def test_save_arrays_is_atomic_npz(tmp_path: Path) -> None:
    out = save_arrays(tmp_path / "out.npz", {"gpu_0/softmax": X, "ids": Y})
    with np.load(out) as data:
        assert sorted(data.files) == ["gpu_0/softmax", "ids"]
        np.testing.assert_array_equal(data["gpu_0/softmax"], X)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]
    with pytest.raises(gk.UsageError) as err:
        save_arrays(tmp_path / "out.npy", {"x": X})
    assert "out.npy" in err.value.message and ".npz" in err.value.hint
    assert not (tmp_path / "out.npy").exists()
