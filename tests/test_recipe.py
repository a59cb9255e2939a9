"""graphkit._recipe: edits written down, checked before anything runs, replayed exactly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import fixture
from onnx import numpy_helper

import graphkit as gk
from graphkit._recipe import Recipe, Step, load_recipe, parse_steps, run_steps, save_recipe
from graphkit.errors import GraphkitError, UsageError

STEPS = [
    {"op": "set_op_type", "node": "Add", "op_type": "Sub"},
    {"op": "rename_tensor", "old": "c", "new": "product"},
    {"op": "set_dims", "tensor": "x", "dims": {"0": "rows"}},
]


def _linear() -> gk.Model:
    return gk.load(fixture("linear_func.onnx"))


def _bytes(model: gk.Model) -> bytes:
    return model.proto.SerializeToString(deterministic=True)


def test_a_recipe_gives_exactly_what_the_same_calls_give() -> None:
    one_by_one = gk.set_dims(gk.rename_tensor(gk.set_op_type(_linear(), "Add", "Sub"), "c", "product"), "x", {0: "rows"})
    assert _bytes(gk.apply_recipe(_linear(), STEPS)) == _bytes(one_by_one)


def test_a_recipe_leaves_its_input_model_unchanged() -> None:
    model = _linear()
    before = _bytes(model)
    gk.apply_recipe(model, STEPS)
    assert _bytes(model) == before


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_saved_recipes_load_back_as_the_same_steps(tmp_path: Path, suffix: str) -> None:
    steps = parse_steps(STEPS)
    path = tmp_path / f"edits{suffix}"
    save_recipe(steps, path)
    loaded = load_recipe(path)
    assert loaded.steps == tuple(steps)
    assert loaded.base_dir == tmp_path.resolve()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # written atomically: no temporary left


def test_both_file_forms_are_read(tmp_path: Path) -> None:
    (tmp_path / "list.json").write_text(json.dumps(STEPS))
    (tmp_path / "object.json").write_text(json.dumps({"steps": STEPS}))
    assert load_recipe(tmp_path / "list.json").steps == load_recipe(tmp_path / "object.json").steps
    assert load_recipe(tmp_path / "list.json").to_list() == [
        {"op": "set_op_type", "node": "Add", "op_type": "Sub"},
        {"op": "rename_tensor", "old": "c", "new": "product"},
        {"op": "set_dims", "tensor": "x", "dims": {"0": "rows"}},
    ]


def test_tensor_values_come_from_npy_files_beside_the_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    np.save(folder / "a.npy", np.full((10, 10), 2, np.float32))
    (folder / "r.json").write_text(json.dumps([
        {"op": "input_to_initializer", "name": "a", "value": {"npy": "a.npy"}},
        {"op": "input_to_initializer", "name": "b", "value": {"value": [[1.5] * 10] * 10, "dtype": "float32"}},
    ]))
    monkeypatch.chdir(tmp_path)  # relative to the recipe, not to the working directory
    result = gk.apply_recipe(_linear(), folder / "r.json")
    values = {t.name: numpy_helper.to_array(t) for t in result.graph.initializer}
    assert values["a"].dtype == np.float32 and (values["a"] == 2).all()
    assert (values["b"] == 1.5).all()
    assert [i.name for i in result.graph.input] == ["x"]


def test_a_merge_step_reads_the_other_model_beside_the_recipe() -> None:
    step = Step("merge", {"other": "asinh.onnx", "connect": {"output": "input"}, "prefixes": ["a/", "b/"]})
    recipe = Recipe((step,), fixture("asinh.onnx").parent)
    merged, results = run_steps(gk.load(fixture("my_add.onnx")), recipe.steps, base_dir=recipe.base_dir)
    assert [n.name for n in merged.graph.node][-1] == "b//Asinh"
    assert [r.changed for r in results] == [True]


def test_an_unknown_operation_is_refused_before_any_step_runs() -> None:
    steps = [STEPS[0], {"op": "set_op_typ", "node": "Mul", "op_type": "Div"}]
    with pytest.raises(UsageError) as err:
        gk.apply_recipe(_linear(), steps)
    assert "step 2" in str(err.value) and "'set_op_typ'" in str(err.value)
    assert "set_op_type" in (err.value.hint or "")


def test_an_unknown_or_missing_argument_names_the_step_and_the_argument() -> None:
    with pytest.raises(UsageError) as err:
        parse_steps([{"op": "rename_tensor", "old": "c", "neww": "d"}])
    assert "step 1" in str(err.value) and "'neww'" in str(err.value)
    assert "new" in (err.value.hint or "")
    with pytest.raises(UsageError) as err:
        parse_steps([{"op": "rename_tensor", "old": "c"}])
    assert "new" in str(err.value)


def test_a_step_that_fails_is_named_by_its_position() -> None:
    steps = [STEPS[0], {"op": "rename_tensor", "old": "no_such_tensor", "new": "d"}]
    with pytest.raises(GraphkitError) as err:
        gk.apply_recipe(_linear(), steps)
    assert str(err.value).startswith("step 2 (rename_tensor)")
    assert "no_such_tensor" in str(err.value)


def test_a_recipe_that_is_not_json_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"op": "cleanup"},]')
    with pytest.raises(UsageError) as err:
        load_recipe(bad)
    assert "bad.json" in str(err.value) and "JSON" in str(err.value)
