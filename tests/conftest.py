"""Shared test helpers: the bundled fixtures and small model builders."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import graphkit as gk

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "graphkit"
FIXTURES = ROOT / "fixtures"


def fixture(name: str) -> Path:
    """Path of a bundled fixture model."""
    return FIXTURES / name


def digest(path: Path) -> str:
    """sha256 of a file, to prove inputs are untouched."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file below ``folder``."""
    return {str(p.relative_to(folder)): digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def checker_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The ``full_check`` of every onnx.checker.check_model call made during the test, in order."""
    import onnx

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
