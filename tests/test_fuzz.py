"""Hostile inputs never crash, hang, raise anything but a GraphkitError, change an input or leave files behind
(bounded runs; the long campaigns are ``python tests/fuzzing.py --kind all --cases 10000``)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from conftest import FIXTURES
from fuzzing import (
    GENERATORS,
    KINDS,
    OPERATIONS,
    Action,
    Workspace,
    campaign,
    exercise,
    fixture_files,
    kind_campaign,
    mutate,
    mutate_bytes,
    mutate_fields,
    run_case,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphkit as gk

FILES = fixture_files()


def test_fixtures_are_all_fuzzed() -> None:
    assert {p.name for p in FILES} >= {"whole_model.onnx", "if_outer_scope.onnx", "loop_scan.onnx", "model.onnx"}


@pytest.mark.slow
def test_bounded_campaign_finds_no_failure() -> None:
    summary = campaign(cases=1500, seed=20261129, timeout=10.0, memory_gb=6.0)
    assert summary.cases == 1500
    assert summary.failures == [] and summary.crashes == []
    # the campaign must reach past loading, or it tests nothing
    assert summary.outcomes_by_op["run"].get("ok", 0) > 20
    assert set(summary.outcomes_by_op) == set(OPERATIONS)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(FILES) - 1), seed=st.integers(0, 2**32), fields=st.booleans())
def test_mutations_end_in_success_or_a_graphkit_error(index: int, seed: int, fields: bool) -> None:
    source = FILES[index]
    rng = random.Random(seed)
    data, mutation = (mutate_fields if fields else mutate_bytes)(source.read_bytes(), rng)
    outcome = exercise(0, source, data, mutation, timeout=10.0,
                       operations=("load", "check", "inspect", "toposort", "save"))
    assert outcome.failures == [], outcome.failures


@pytest.mark.slow
def test_fixtures_untouched_by_fuzzing() -> None:
    from conftest import folder_digest

    before = folder_digest(FIXTURES)
    campaign(cases=20, seed=1)
    kind_campaign("cli", cases=10, seed=1)
    assert folder_digest(FIXTURES) == before


# ------------------------------------------------------------------------------ the judge of a case


def _judged(monkeypatch: pytest.MonkeyPatch, make: object, timeout: float = 10.0):
    monkeypatch.setitem(GENERATORS, "fake", make)
    return run_case("fake", 0, 0, timeout)


def test_a_changed_input_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _judged(monkeypatch, lambda ws, rng: Action(
        "write", lambda: (ws.inside / "ext" / "model.data").write_bytes(b"x"), False))
    assert verdict.result == "ok" and verdict.modified == ["$W/in/ext/model.data"] and verdict.failed


def test_an_output_that_is_also_read_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(ws: Workspace, rng: random.Random) -> Action:
        data = str(ws.inside / "ext" / "model.data")
        return Action("save onto own weights", lambda: Path(data).write_bytes(b"model"), True,
                      outputs=(data,), reads=(str(ws.inside / "ext" / "model.onnx"), data))

    assert _judged(monkeypatch, make).modified == ["$W/in/ext/model.data"]


def test_replacing_an_unrelated_file_named_as_output_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(ws: Workspace, rng: random.Random) -> Action:
        other = str(ws.inside / "split" / "part_00.onnx")
        return Action("write over another file", lambda: Path(other).write_bytes(b"model"), True,
                      outputs=(other,), reads=(str(ws.model("static")),))

    assert _judged(monkeypatch, make).modified == []


def test_a_fifo_replaced_by_a_file_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def replace(ws: Workspace) -> None:
        os.unlink(ws.special / "fifo.onnx")
        (ws.special / "fifo.onnx").write_bytes(b"model")

    verdict = _judged(monkeypatch, lambda ws, rng: Action("replace", lambda: replace(ws), False))
    assert verdict.modified == ["$W/special/fifo.onnx"]


def test_files_left_by_a_failed_call_are_partial(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(ws: Workspace) -> None:
        (ws.out / "half.onnx").write_bytes(b"half")
        raise gk.UsageError("the second output cannot be written", hint="pick another folder")

    verdict = _judged(monkeypatch, lambda ws, rng: Action("fail", lambda: fail(ws), False))
    assert verdict.result == "error" and verdict.partial == ["$W/out/half.onnx"]


def test_a_temp_file_left_by_a_successful_call_is_partial(monkeypatch: pytest.MonkeyPatch) -> None:
    def succeed(ws: Workspace) -> None:
        (ws.out / "model.onnx").write_bytes(b"whole")
        (ws.out / ".model.onnx.tmp123").write_bytes(b"left over")

    verdict = _judged(monkeypatch, lambda ws, rng: Action("ok", lambda: succeed(ws), False))
    assert verdict.result == "ok" and verdict.partial == ["$W/out/.model.onnx.tmp123"]


def test_a_blocked_fifo_read_is_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _judged(monkeypatch, lambda ws, rng: Action(
        "read", lambda: (ws.special / "fifo.yaml").read_bytes(), False), timeout=1.0)
    assert verdict.result == "hang" and verdict.failed


@pytest.mark.parametrize(("raise_", "result"), [(KeyError("x"), "traceback"), (MemoryError(), "traceback"),
                                                (gk.NameNotFoundError("no x", hint="h"), "error")])
def test_only_graphkit_errors_are_errors(monkeypatch: pytest.MonkeyPatch, raise_: BaseException,
                                         result: str) -> None:
    def call() -> None:
        raise raise_

    verdict = _judged(monkeypatch, lambda ws, rng: Action("raise", call, False))
    assert verdict.result == result


@pytest.mark.parametrize(("code", "result"), [(0, "ok"), (1, "ok"), (2, "error"), (3, "traceback"), (None, "traceback")])
def test_cli_exit_codes(monkeypatch: pytest.MonkeyPatch, code: int | None, result: str) -> None:
    verdict = _judged(monkeypatch, lambda ws, rng: Action("exit", lambda: code, True))
    assert verdict.result == result


# ------------------------------------------------------------------------------- bounded campaigns

#: Kinds whose bounded campaign still finds open defects: for them the suite only checks that the harness
#: runs; a kind leaves the set when its campaign comes out clean (all have, on main).
OPEN: set[str] = set()


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "models"])
def test_bounded_hostile_campaign(kind: str) -> None:
    cases = 20 if kind in OPEN else 150
    summary = kind_campaign(kind, cases=cases, seed=20261202, timeout=10.0, memory_gb=4.0)
    assert summary.cases == cases
    assert summary.ok + summary.errors > 0  # the harness itself works
    if kind not in OPEN:
        assert summary.failures == [], [f["what"] for f in summary.failures][:10]
        assert summary.ok > 0 and summary.errors > 0  # cases reach past argument checks, and are hostile



def test_bytes_campaign_case_2118_of_seed_1_ends_in_success_or_a_graphkit_error() -> None:
    # dims 0 and 2**62 on whole_model's input, and a cycle: expose's observed run met numpy's "array is too big"
    source = FILES[2118 % len(FILES)]
    data, mutation = mutate(source.read_bytes(), random.Random("1:2118"))
    assert mutation == "field:dim,field:dim,field:cycle"
    outcome = exercise(2118, source, data, mutation, timeout=60.0)
    assert outcome.failures == [], outcome.failures
