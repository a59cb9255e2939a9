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


@pytest.fixture
def small_external_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """``graphkit.load`` leaves even tiny external tensors on disk (it reads those under
    ``SMALL_EXTERNAL`` bytes in): for tests about where external data hides, built with a few floats."""
    from graphkit import _io

    monkeypatch.setattr(_io, "SMALL_EXTERNAL", 0)


def flatten_export(batch: int | str = 1) -> onnx.ModelProto:
    """Conv -> Relu -> Reshape to [batch, -1] with the target computed as torch.onnx exports it
    (Shape -> Gather -> Unsqueeze -> Concat) -> MatMul -> Add: shape constants (int64) beside
    weights of 1.7 KB and 40 KB, every one a raw-data initializer (as exporters write them)."""
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "conv.weight"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(rng.standard_normal((1024, 10)).astype(np.float32), "fc.weight"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc.bias"),
    ]
    nodes = [
        onnx.helper.make_node("Conv", ["x", "conv.weight"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Relu", ["c"], ["r"], name="/Relu"),
        onnx.helper.make_node("Shape", ["r"], ["s"], name="/Shape"),
        onnx.helper.make_node("Gather", ["s", "zero"], ["n"], name="/Gather", axis=0),
        onnx.helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="/Unsqueeze"),
        onnx.helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="/Concat", axis=0),
        onnx.helper.make_node("Reshape", ["r", "target"], ["flat"], name="/Reshape"),
        onnx.helper.make_node("MatMul", ["flat", "fc.weight"], ["m"], name="/fc/MatMul"),
        onnx.helper.make_node("Add", ["m", "fc.bias"], ["y"], name="/fc/Add"),
    ]
    graph = onnx.helper.make_graph(
        nodes, "flatten_export", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, 10])], initializer=inits)
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)


def save_every_tensor_external(proto: onnx.ModelProto, folder: Path, name: str = "model.onnx") -> Path:
    """Save as exporters that write every initializer externally do (onnx.save, size_threshold=0)."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, str(folder / name), save_as_external_data=True, all_tensors_to_one_file=True,
              location="x.data", size_threshold=0)
    return folder / name
