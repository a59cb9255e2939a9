"""Shared test helpers: the paths tests read (fixtures, onnx's light models), fixtures and model builders."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import graphkit as gk

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "graphkit"
FIXTURES = ROOT / "fixtures"
#: The real architectures shipped with the onnx wheel (alexnet, resnet50, ...: light_*.onnx).
LIGHT = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


def fixture(name: str) -> Path:
    """Path of a bundled fixture model."""
    return FIXTURES / name


def digest(path: Path) -> str:
    """sha256 of a file, to prove inputs are untouched."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file below ``folder``."""
    return {str(p.relative_to(folder)): digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


def _set_weight(model: gk.Model, name: str, change: Callable[[np.ndarray], np.ndarray]) -> None:
    """Replace initializer ``name`` of ``model`` (in place) by ``change`` of its value."""
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t)), name))


def planted_changes(model: gk.Model) -> gk.Model:
    """A copy of the whole_model fixture with nine known differences (and one within atol 1e-6)."""
    b = model.copy()
    g = b.graph
    next(n for n in g.node if n.name == "/Add").op_type = "Sub"
    _set_weight(b, "convs2.0.weight", lambda w: w * 1.01)
    _set_weight(b, "convs4.0.bias", lambda w: w + 1e-9)  # within atol: not a change
    next(n for n in g.node if n.name == "/convs1/convs1.1/Conv").name = "renamed_conv"
    last = next(n for n in g.node if n.name == "/convs4/convs4.2/Conv")
    last.input[0] = "relu_out"
    g.node.insert(list(g.node).index(last), onnx.helper.make_node(
        "Relu", ["/convs4/convs4.1/Conv_output_0"], ["relu_out"], name="relu_new"))
    next(n for n in g.node if n.name == "/convs2/convs2.1/Conv").attribute.append(
        onnx.helper.make_attribute("auto_pad", "NOTSET"))
    b.proto.opset_import[0].version = 18
    b.proto.metadata_props[0].value = "changed"
    g.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return b


@pytest.fixture
def checker_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``full_check`` of every onnx.checker.check_model call made during the test, in order."""
    calls: list[bool] = []
    real = onnx.checker.check_model

    def spy(model: object, full_check: bool = False, **kwargs: object) -> None:
        calls.append(full_check)
        real(model, full_check=full_check, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(onnx.checker, "check_model", spy)
    return calls


@pytest.fixture
def whole_model() -> gk.Model:
    return gk.load(fixture("whole_model.onnx"))


@pytest.fixture
def ext_copy(tmp_path: Path) -> Path:
    """A private copy of the external-weights fixture folder; returns its model path."""
    target = tmp_path / "ext"
    shutil.copytree(FIXTURES / "ext_weights", target)
    return target / "model.onnx"
