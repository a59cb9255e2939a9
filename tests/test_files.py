"""graphkit._files, _numbers and _arrays: a user's input files and numbers, read strictly."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

import graphkit as gk
from graphkit import _arrays
from graphkit._arrays import open_npz, read_npy
from graphkit._files import json_depth, parse_json, parse_yaml, read_data, read_text
from graphkit._numbers import INT64_MAX, max_threads, parse_float, parse_int


@pytest.mark.parametrize("text", ["²", "٣", "1_000", "9" * 30, "0x10", "", " ", "1.0", "--1", str(INT64_MAX + 1)])
def test_parse_int_takes_ascii_digits_within_int64(text: str) -> None:
    with pytest.raises(gk.UsageError) as err:
        parse_int(text, what="--dim 'b=x'")
    assert err.value.message.startswith("--dim 'b=x': ") and err.value.hint


def test_parse_int_bounds_and_values() -> None:
    assert parse_int(" 17 ", what="v") == 17
    assert parse_int("-3", what="axis", lo=-4, hi=3) == -3
    assert parse_int(str(INT64_MAX), what="v") == INT64_MAX
    with pytest.raises(gk.UsageError, match=r"threads: 9 is out of range \(from 0 to 8\)"):
        parse_int("9", what="threads", lo=0, hi=8)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "Infinity", "1,5", "٣", "0x1p3", ""])
def test_parse_float_refuses_what_is_not_a_finite_ascii_number(text: str) -> None:
    with pytest.raises(gk.UsageError, match="--fragment-mb"):
        parse_float(text, what="--fragment-mb")


def test_parse_float_bounds() -> None:
    assert parse_float("1e-5", what="t", lo=0.0) == 1e-5
    assert parse_float(".5", what="t") == 0.5
    with pytest.raises(gk.UsageError, match="above 0"):
        parse_float("0", what="size", lo=0, lo_open=True)


def test_max_threads_is_a_small_multiple_of_the_cores() -> None:
    assert max_threads() == 4 * (os.cpu_count() or 1)


def test_read_text_names_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(b'[\n{"op": "\xff"}]')
    with pytest.raises(gk.UsageError, match=r"r.json is not UTF-8 text: byte 0xff at offset 10 \(line 2\)"):
        read_text(path, what="recipe")


def test_read_text_refuses_folders_fifos_and_large_files(tmp_path: Path) -> None:
    with pytest.raises(gk.UsageError, match="it is a folder"):
        read_text(tmp_path, what="recipe")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(gk.UsageError, match="FIFO"):
        read_text(fifo, what="recipe")
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 101)
    with pytest.raises(gk.UsageError, match="too large"):
        read_text(big, what="recipe", max_bytes=100)


def test_json_depth_skips_strings() -> None:
    assert json_depth('{"a": "[[[[", "b": [[1]]}', 100) == 3
    assert json_depth('["\\"[["]', 100) == 1


def test_parse_json_is_bounded_and_one_line() -> None:
    with pytest.raises(gk.UsageError, match="more than 100 deep"):
        parse_json("[" * 100_000 + "]" * 100_000, what="map")
    with pytest.raises(gk.UsageError, match="at line 2, column 1") as err:
        parse_json('{"a":\n}', what="map")
    assert "\n" not in err.value.message
    with pytest.raises(gk.UsageError, match="NaN"):
        parse_json('{"a": NaN}', what="map")
    assert parse_json('{"a": [1, {"b": null}]}', what="map") == {"a": [1, {"b": None}]}


def test_parse_yaml_refuses_aliases_and_depth() -> None:
    with pytest.raises(gk.UsageError, match="aliases") as err:
        parse_yaml("a: &x [1, 2]\nb: *x\n", what="recipe")
    assert "anchor" in (err.value.hint or "")
    with pytest.raises(gk.UsageError, match="deep"):
        parse_yaml("- " * 200 + "x", what="recipe")
    with pytest.raises(gk.UsageError, match=r"recipe is not valid YAML: .* at line 3, column 1$") as syntax:
        parse_yaml("- op: cleanup\n  a: [1,\n", what="recipe")
    assert "\n" not in syntax.value.message
    assert parse_yaml("- op: set_dims\n  dims: {0: batch}\n", what="recipe") == [{"op": "set_dims",
                                                                                     "dims": {0: "batch"}}]


def test_read_data_picks_the_format_by_suffix(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("k: v\n")
    (tmp_path / "a.json").write_text('{"k": "v"}')
    assert read_data(tmp_path / "a.yml", what="x") == read_data(tmp_path / "a.json", what="x") == {"k": "v"}


def test_read_npy_round_trips_c_and_fortran_order(tmp_path: Path) -> None:
    value = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    np.save(tmp_path / "c.npy", value)
    np.save(tmp_path / "f.npy", np.asfortranarray(value))
    np.testing.assert_array_equal(read_npy(tmp_path / "c.npy"), value)
    np.testing.assert_array_equal(read_npy(tmp_path / "f.npy"), value)


def test_read_npy_refuses_extra_bytes_and_objects(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.ones(3, np.float32))
    with open(path, "ab") as handle:
        handle.write(b"\0" * 4)
    with pytest.raises(gk.FeedError, match="has extra bytes"):
        read_npy(path)
    np.save(path, np.array(["a", None], dtype=object), allow_pickle=True)
    with pytest.raises(gk.FeedError, match="Python objects"):
        read_npy(path)


def test_npz_is_read_lazily_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.npz"
    np.savez_compressed(path, small=np.ones(4, np.float32), big=np.zeros(1 << 18, np.float32))
    monkeypatch.setattr(_arrays, "MAX_ARRAY_BYTES", 1 << 16)
    with open_npz(path) as archive:
        assert archive.files == ["small", "big"]
        np.testing.assert_array_equal(archive["small"], np.ones(4, np.float32))
        with pytest.raises(gk.FeedError, match=r"x.npz\[big\] would take 1048\d+ bytes"):
            archive["big"]


def test_npz_that_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.npy", b"not an npy")
    with open_npz(path) as arrays, pytest.raises(gk.FeedError, match=r"x.npz\[a\] as .npy"):
        arrays["a"]
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(gk.FeedError, match=r"as \.npz"):
        open_npz(path)


def test_npz_with_an_encrypted_member(tmp_path: Path) -> None:
    path = tmp_path / "x.npz"
    np.savez(path, a=np.ones(3, np.float32))
    data = bytearray(path.read_bytes())
    central = data.index(b"PK\x01\x02")
    data[central + 8] |= 1  # the "encrypted" flag: zipfile then asks for a password
    path.write_bytes(bytes(data))
    with open_npz(path) as arrays, pytest.raises(gk.FeedError, match=r"x\.npz\[a\]: .*encrypted"):
        arrays["a"]
