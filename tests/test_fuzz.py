"""Mutated fixtures never crash, hang or raise anything but a GraphkitError (bounded; see tests/fuzzing.py)."""

from __future__ import annotations

import random

import pytest
from conftest import FIXTURES
from fuzzing import OPERATIONS, campaign, exercise, fixture_files, mutate_bytes, mutate_fields
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    assert folder_digest(FIXTURES) == before
