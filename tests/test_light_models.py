"""The real architectures shipped with onnx (light_*.onnx) split into parts and chain-run to their
reference outputs, on the inputs onnx's backend test runner generates for them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT
from onnx.backend.test.runner import Runner

import graphkit as gk
from graphkit._feeds import read_tensor_file

MODELS = sorted(LIGHT.glob("light_*.onnx"))
#: onnx's backend test compares these models with rtol 1e-3, atol 1e-7 (its defaults).
RTOL, ATOL = 1e-3, 1e-7


def _runner_inputs(model: gk.Model) -> dict[str, np.ndarray]:
    """The inputs onnx.backend.test.runner feeds the light models (deterministic, not random)."""
    inits = {t.name for t in model.graph.initializer}
    return {
        v.name: Runner.generate_dummy_data(v, seed=0, name=model.graph.name, random=False)
        for v in model.graph.input
        if v.name not in inits
    }


def _reference(path: Path) -> list[np.ndarray]:
    found = []
    for i in range(8):
        file = path.with_name(f"{path.stem}_output_{i}.pb")
        if not file.exists():
            break
        found.append(onnx.numpy_helper.to_array(read_tensor_file(file)))
    return found


def test_the_light_models_are_there() -> None:
    assert len(MODELS) >= 8, MODELS


@pytest.mark.slow
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem.removeprefix("light_"))
def test_light_model_split_in_parts_chains_to_the_reference_outputs(path: Path) -> None:
    model = gk.load(path)
    expected = _reference(path)
    if not expected:
        pytest.skip(f"{path.name} ships no reference outputs")
    parts = 4 if len(model.graph.node) >= 100 else 3
    result = gk.split(model, parts=parts)
    assert len(result) == parts
    assert sum(f.nodes for f in result) == len(model.graph.node)
    assert all(len(cut) == 1 for cut in result.cuts), result.cuts  # single-tensor cuts exist in these nets
    feeds = _runner_inputs(model)
    chain = gk.run_chain(result, feeds, reference=model, opt_level="disable")
    outputs = [chain.outputs[o.name] for o in model.graph.output]
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # The shipped references are flat (these "light" nets have constant weights), so also compare with
    # the whole model run here, and check that what crosses the first cut carries real information.
    assert chain.compared and all(d.passed for d in chain.diffs), [d.to_dict() for d in chain.diffs]
    (cut,) = result.cuts[0]
    first = gk.run(result[0].model, {k: v for k, v in feeds.items() if k in {p.name for p in result[0].inputs}},
                   opt_level="disable")[cut]
    np.testing.assert_array_equal(first, gk.run(model, feeds, outputs=[cut], opt_level="disable")[cut])
    assert np.unique(first).size > 10
