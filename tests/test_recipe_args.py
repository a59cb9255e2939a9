"""graphkit._recipe: every step's arguments are checked against the edit function's declared types before
any step runs, and a recipe's files (the recipe, its {npy: ...} values) are read strictly."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture

import graphkit as gk
from graphkit._recipe import OPERATIONS, Step, _describe, _expected, load_recipe, run_steps


def test_every_operation_argument_has_a_described_type() -> None:
    for op, function in OPERATIONS.items():
        expected = _expected(op)
        params = [p for p in inspect.signature(function).parameters if p not in ("model", "a", "b", "check")]
        assert set(params) <= set(expected), op
        for hint in expected.values():
            assert "typing" not in _describe(hint) and "collections" not in _describe(hint), (op, hint)


@pytest.mark.parametrize("op, args, said", [
    ("bypass_node", {"node": "/Add", "input_index": True}, "argument 'input_index' must be a whole number"),
    ("bypass_node", {"node": "/Add", "input_index": 2**70}, "argument 'input_index' must be a whole number"),
    ("set_op_type", {"node": "/Add", "op_type": "Sub", "domain": 3}, "argument 'domain' must be a string or null"),
    ("set_dims", {"tensor": "input.1", "dims": [1, 2.5]}, "argument 'dims' must be"),
    ("set_attribute", {"node": "/Add", "attribute": "a", "value": {1: 2}}, "argument 'value' must be"),
    ("merge", {"other": "b.onnx", "connect": {}, "prefixes": ["a"]}, "argument 'prefixes' must be a list of 2"),
    ("insert_node", {"after": "x", "op_type": "Relu", "attributes": []}, "argument 'attributes' must be a mapping"),
])
def test_wrong_types_are_named_before_any_step_runs(whole_model: gk.Model, op: str, args: dict[str, Any],
                                                    said: str) -> None:
    before = whole_model.proto.SerializeToString()
    steps = [Step("cleanup"), Step(op, args)]
    with pytest.raises(gk.UsageError, match=f"step 2 \\({op}\\): {said}") as err:
        run_steps(whole_model, steps)
    assert err.value.hint and op in err.value.hint
    assert whole_model.proto.SerializeToString() == before


def test_right_types_pass_through(whole_model: gk.Model) -> None:
    result, done = run_steps(whole_model, [Step("set_dims", {"tensor": "input.1", "dims": {"0": "batch"}}),
                                           Step("bypass_node", {"node": "/Add", "input_index": 0})])
    assert [d.changed for d in done] == [True, True]
    assert "/Add" not in {n.name for n in result.graph.node}


def test_npy_value_is_read_strictly(tmp_path: Path, whole_model: gk.Model) -> None:
    os.mkfifo(tmp_path / "v.npy")
    steps = [Step("set_initializer", {"tensor": "w", "value": {"npy": "v.npy"}})]
    with pytest.raises(gk.UsageError, match=r"step 1 \(set_initializer\): argument 'value': .*FIFO"):
        run_steps(whole_model, steps, base_dir=tmp_path)
    with pytest.raises(gk.UsageError, match="file name must be a string"):
        run_steps(whole_model, [Step("set_initializer", {"tensor": "w", "value": {"npy": [1]}})], base_dir=tmp_path)
    np.save(tmp_path / "o.npy", np.array([None], dtype=object), allow_pickle=True)
    with pytest.raises(gk.UsageError, match="Python objects"):
        run_steps(whole_model, [Step("set_initializer", {"tensor": "w", "value": {"npy": "o.npy"}})],
                  base_dir=tmp_path)


@pytest.mark.parametrize("dtype", ["object", "datetime64[s]", "V8", "nonsense"])
def test_literal_tensor_dtypes_are_numeric(whole_model: gk.Model, dtype: str) -> None:
    with pytest.raises(gk.UsageError, match="dtype"):
        run_steps(whole_model, [Step("set_initializer", {"tensor": "w", "value": {"value": [1], "dtype": dtype}})])


def test_load_recipe_reads_yaml_without_aliases(tmp_path: Path) -> None:
    path = tmp_path / "r.yaml"
    path.write_text("- op: set_dims\n  tensor: &t input.1\n  dims: {0: batch}\n- op: cleanup\n")
    assert [s.op for s in load_recipe(path).steps] == ["set_dims", "cleanup"]
    path.write_text("- op: set_dims\n  tensor: &t input.1\n  dims: {0: *t}\n")
    with pytest.raises(gk.UsageError, match=r"r\.yaml is not valid YAML: aliases"):
        load_recipe(path)


def test_load_recipe_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(gk.UsageError, match=r"cannot read recipe .*nope\.json"):
        load_recipe(tmp_path / "nope.json")
    (tmp_path / "r.json").write_text(json.dumps([{"op": "cleanup"}]))
    assert load_recipe(tmp_path / "r.json").steps == (Step("cleanup"),)
    assert fixture("whole_model.onnx").is_file()
