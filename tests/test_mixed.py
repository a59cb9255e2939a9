"""auto_mixed_precision: the fewest float32 nodes, found by measurement in few runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import LIGHT, fixture
from onnx import TensorProto, helper
from test_convert import overflow_model

import graphkit as gk
from graphkit import _mixed
from graphkit.cli import main


def rounding_model() -> gk.Model:
    """y = x + 1000.3 - 1000: float16 holds 1000.3 as 1000.5 (its spacing there is 0.5), an error of 0.2."""
    return gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) {
            k = Constant <value = float[1] {1000.3}> ()
            m = Constant <value = float[1] {1000.0}> ()
            r = Relu (x)
            a = Add (r, k)
            y = Sub (a, m)
        }""")


def test_overflow_fails_plain_float16_and_passes_keeping_only_the_overflowing_nodes() -> None:
    model = overflow_model()
    x = np.full((2, 3), 0.5, np.float32)
    plain = gk.run(gk.to_float16(model, keep_io_types=True), {"x": x})["y"]
    assert not np.allclose(plain, x, atol=1e-3, rtol=1e-2)
    before = model.serialized()
    result = gk.auto_mixed_precision(model, keep_io_types=True, feeds={"x": x})
    assert model.serialized() == before
    assert result.passed and result.candidates == 3
    # Div's 1e6 is beyond float16 (65504): Div stays float32. ONNX Runtime's CPU provider computes the
    # Muls in float32 between the Casts it inserts, so x·1e3·1e3 does not overflow there: they may stay
    # float16, and whatever is kept is needed (dropping any kept node leaves tolerance).
    kept = [(k.node, k.op_type) for k in result.kept]
    assert ("#4", "Div") in kept and set(kept) <= {("#3", "Mul"), ("#4", "Div")}  # never the first Mul
    div = next(k for k in result.kept if k.node == "#4")
    assert div.local_max_abs == pytest.approx(0.5e6 / 65504 - 0.5, rel=1e-3)  # its own error: 1e6 became 65504
    assert div.local_relative == pytest.approx((0.5e6 / 65504 - 0.5) / 0.5, rel=1e-3)  # relative to its 0.5s
    for dropped in result.keep_node():
        rest = [n for n in result.keep_node() if n != dropped]
        y = gk.run(gk.to_float16(model, keep_io_types=True, keep_node=rest), {"x": x})["y"]
        assert not np.allclose(y, x, atol=1e-3, rtol=1e-2)
    np.testing.assert_allclose(gk.run(result.model, {"x": x})["y"], x, rtol=1e-3)
    assert result.runs == result.trial_runs + result.fragment_runs and result.runs <= 8


def test_a_loss_without_overflow_is_found_by_bisection() -> None:
    result = gk.auto_mixed_precision(rounding_model(), keep_io_types=True,
                                     feed_options=gk.FeedOptions(seed=2, ranges={"x": (0.0, 1.0)}))
    assert result.passed
    assert [k.node for k in result.kept] == ["#3"]  # its weight stays float32; Relu and Sub stay float16
    assert all(k.reason == "the outputs leave tolerance when it computes in float16" for k in result.kept)
    assert result.output_errors["y"] <= 1e-3


def chain_model(blocks: int = 80, lossy: tuple[int, ...] = (10, 40, 70)) -> gk.Model:
    """A chain of ``blocks`` Mul-Mul-Relu blocks whose weights float16 holds exactly (2, 0.5), and, after
    the blocks in ``lossy``, ``t + 1000.3 - 1000``: float16 holds 1000.3 as 1000.5, an error of 0.2 there."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [1], [0.5])
    two = helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])
    big = helper.make_tensor("big", TensorProto.FLOAT, [1], [1000.3])
    thousand = helper.make_tensor("thousand", TensorProto.FLOAT, [1], [1000.0])
    nodes, t = [], "x"
    for i in range(blocks):
        nodes += [helper.make_node("Mul", [t, "two"], [f"m{i}"], name=f"mul{i}"),
                  helper.make_node("Mul", [f"m{i}", "half"], [f"a{i}"], name=f"half{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        t = f"r{i}"
        if i in lossy:
            nodes += [helper.make_node("Add", [t, "big"], [f"big{i}"], name=f"lossy{i}"),
                      helper.make_node("Sub", [f"big{i}", "thousand"], [f"back{i}"], name=f"back{i}")]
            t = f"back{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])],
                              [half, two, big, thousand])
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_the_search_on_a_long_chain_takes_ten_times_fewer_runs_than_nodes() -> None:
    model = chain_model()
    assert len(model.lazy_proto.graph.node) == 247
    result = gk.auto_mixed_precision(model, keep_io_types=True, feed_options=gk.FeedOptions(seed=1))
    assert result.passed and result.output_errors["y"] <= 1e-3
    kept = {k.node for k in result.kept}
    assert {"lossy10", "lossy40", "lossy70"} <= kept <= {"lossy10", "lossy40", "lossy70", "back10", "back40", "back70"}
    for k in result.kept:  # each its own error 0.2 (1000.3 held as 1000.5), found again at the output
        assert k.local_max_abs == pytest.approx(0.2, abs=1e-3) and k.output_max_abs == pytest.approx(0.2, abs=1e-3)
    assert result.measured == result.candidates == 247  # every node's own error measured
    assert result.runs * 10 <= len(model.lazy_proto.graph.node)  # one run per node would be 247
    # the first walk's two passes, then a pass per trial: the chain fits one session, where each trial
    # runs whole, as the user's session will. The least such a search can do: the 3 Adds' own errors
    # (0.2) are beyond the tolerance, so they are tried first, pass, and each is tried away once
    # (onnxconverter-common runs this model 45 times)
    assert result.trials == 4 and result.passes == 2 + result.trials == result.runs
    plain = gk.to_float16(model, keep_io_types=True)
    x = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1))
    assert np.abs(gk.run(plain, x)["y"] - gk.run(model, x)["y"]).max() > 0.1  # float16 alone loses 0.2 per spot


def test_a_model_fine_in_float16_keeps_nothing(whole_model: gk.Model) -> None:
    result = gk.auto_mixed_precision(whole_model, keep_io_types=True)
    # the first walk (float32, and every node again in float16: 2 passes), then the float16 model
    assert result.passed and result.kept == () and result.trials == 1 and result.passes == 3.0
    assert result.to_dict()["passes"] == 3.0 and result.to_dict()["runs"] == result.runs >= 3


def test_unreachable_tolerance_is_reported_not_searched_node_by_node(whole_model: gk.Model) -> None:
    result = gk.auto_mixed_precision(whole_model, tolerance=gk.Tolerance(0.0, 0.0))  # float16 inputs: never exact
    assert not result.passed and result.trials == 2 and result.passes <= 4  # float16, then every node float32


def test_cli_auto_mixed_writes_the_recipe_that_edit_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "overflow.onnx"
    gk.save(overflow_model(), source)
    out = tmp_path / "mixed.onnx"
    assert main(["convert", str(source), str(out), "--float16", "--auto-mixed", "--keep-io-types", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kept = [k["node"] for k in report["kept"]]
    assert report["passed"] and "#4" in kept and report["runs"] <= 8
    recipe = tmp_path / "mixed.recipe.yaml"
    assert yaml.safe_load(recipe.read_text()) == [
        {"op": "to_float16", "keep_io_types": True, "keep_op": [], "keep_node": kept}]
    again = tmp_path / "again.onnx"
    assert main(["edit", str(source), str(again), "--recipe", str(recipe)]) == 0
    x = np.full((2, 3), 0.25, np.float32)
    np.testing.assert_allclose(gk.run(gk.load(again), {"x": x})["y"], x, rtol=1e-3)


def test_cli_auto_mixed_prints_why_and_exits_1_when_out_of_reach(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    assert main(["convert", str(fixture("whole_model.onnx")), str(out), "--float16", "--auto-mixed",
                 "--atol", "0", "--rtol", "0", "--save-recipe", str(tmp_path / "r.json")]) == 1
    text = capsys.readouterr().out
    assert "NOT within atol 0 / rtol 0" in text and "model pass(es)" in text and "session run(s)" in text
    assert json.loads((tmp_path / "r.json").read_text())[0]["op"] == "to_float16"


def test_cli_auto_mixed_with_an_empty_output_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit.cli import main

    assert main(["convert", str(fixture("whole_model.onnx")), "", "--float16", "--auto-mixed"]) == 2
    assert "names no file" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "inception_v1", "shufflenet"])
def test_light_models_keep_nothing_in_three_passes(name: str) -> None:
    model = gk.load(LIGHT / f"light_{name}.onnx")
    result = gk.auto_mixed_precision(model, keep_io_types=False)  # float16 inputs and outputs too
    assert result.passed and result.kept == () and result.trials == 1 and result.passes == 3.0
    assert result.candidates > 100 and max(result.output_errors.values()) <= 1e-3
    x = gk.make_feeds(model)
    want, got = gk.run(model, x), gk.run(result.model, {k: v.astype(np.float16) for k, v in x.items()})
    for name_, value in want.items():
        np.testing.assert_allclose(got[name_].astype(np.float32), value, atol=1e-3, rtol=1e-2)


def test_an_if_whose_bodies_read_the_lossy_tensor_is_measured_with_its_bodies() -> None:
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x, bool c) => (float[4] y) {
            k = Constant <value = float[1] {1000.3}> ()
            t = Constant <value = float[1] {1000.0}> ()
            r = Relu (x)
            a = Add (r, k)
            y = If (c) <then_branch = g1 () => (float[4] o1) { o1 = Sub (a, t) },
                        else_branch = g2 () => (float[4] o2) { h = Sub (a, t)
                                                               o2 = Neg (h) }>
        }""")
    feeds = {"x": np.array([0.1, 0.2, 0.3, 0.4], np.float32), "c": np.array(True)}
    result = gk.auto_mixed_precision(model, keep_io_types=True, feeds=feeds)
    assert result.passed and result.measured == result.candidates == 3  # Relu, Add and the If (its bodies inside)
    assert [(k.node, k.op_type) for k in result.kept] == [("#3", "Add")]
    assert result.kept[0].local_max_abs == pytest.approx(0.2, abs=1e-3)
    np.testing.assert_allclose(gk.run(result.model, feeds)["y"], feeds["x"] + np.float32(1000.3) - 1000, atol=1e-3)


def test_trials_run_fragment_by_fragment_within_the_budget() -> None:
    model = chain_model(blocks=12, lossy=(3, 8))
    options = gk.FeedOptions(seed=1)
    whole = gk.auto_mixed_precision(model, keep_io_types=True, feed_options=options)
    split = gk.auto_mixed_precision(model, keep_io_types=True, feed_options=options,
                                    fragment_bytes=4096)  # a few nodes per fragment
    assert whole.keep_node() == ["lossy3", "lossy8"]
    assert split.trial_runs > whole.trial_runs  # more, smaller sessions
    # where fragments end, float16 values pass as ONNX Runtime holds them in one session (float32 when
    # it computes the nodes on both sides in float32): the same nodes are found
    assert split.passed and split.keep_node() == whole.keep_node()
    x = gk.make_feeds(model, feed_options=options)
    y = gk.run(split.model, x)["y"]
    np.testing.assert_allclose(y, gk.run(model, x)["y"], atol=1e-3, rtol=1e-2)


def test_a_trial_resumes_from_the_values_an_earlier_trial_computed() -> None:
    # (a model beyond the fragment budget: one within it runs each trial whole, in one session)
    model = chain_model(blocks=40, lossy=(10, 30))
    search = _mixed._Search(model, _mixed.MIXED_TOLERANCE, None, gk.FeedOptions(seed=1), True, [], [], None,
                            fragment_bytes=16384)
    search.reference = gk.run(model, search.feeds)
    search.candidates = list(search._convert({}).main_converted)
    lossy = [k for k, n in enumerate(search.nodes) if n.name in ("lossy10", "lossy30")]
    first = search._trial(set(lossy))
    spent = search.work
    assert first.passed and spent == pytest.approx(len(search.nodes))  # one pass: nothing to resume from
    # lossy30 float16 too: the values up to lossy10's float32 output are those of the first trial
    again = search._trial({lossy[0]})
    resumed = (search.work - spent) / len(search.nodes)
    assert not again.passed and 0 < resumed < 0.8  # (from behind lossy10 at the latest)
    fresh = _mixed._Search(model, _mixed.MIXED_TOLERANCE, None, gk.FeedOptions(seed=1), True, [], [], None,
                           fragment_bytes=16384)
    fresh.reference, fresh.candidates = search.reference, search.candidates
    assert fresh._trial({lossy[0]}).errors == again.errors  # the same outputs as a trial from the start
    assert fresh.work == pytest.approx(len(search.nodes))


def test_signatures_tell_computations_apart_and_not_names() -> None:
    model = chain_model(blocks=3, lossy=(1,))
    plain = gk.to_float16(model, keep_io_types=True)
    kept = gk.to_float16(model, keep_io_types=True, keep_node=["lossy1"])
    sig = {name: _mixed._signatures(m.lazy_proto, _graph_index(m)) for name, m in (("plain", plain), ("kept", kept))}
    assert sig["plain"]["r0"] == sig["kept"]["r0"]  # upstream of the node that differs
    assert sig["plain"]["big1"] != sig["kept"]["big1"]  # float16 against float32
    assert sig["plain"]["back1"] != sig["kept"]["back1"]  # and what reads it


def _graph_index(model: gk.Model) -> object:
    from graphkit._graph import GraphIndex

    return GraphIndex(model.lazy_proto.graph)


def test_cuts_only_where_no_float16_value_is_alive() -> None:
    from graphkit._graph import GraphIndex

    model = chain_model(blocks=4, lossy=(2,))
    conversion = _mixed.convert_float16(model, keep_io_types=True, keep_op=[], keep_node=["lossy2"], keep_main={})
    index = GraphIndex(conversion.model.lazy_proto.graph)
    add = index.producer["big2"]
    cuts = _mixed._cuts(index.order, index, conversion.main_float16, [add])
    assert cuts  # around the float32 Add
    for node in cuts:  # each cut: every value alive there is float32
        at = index.order.index(node)
        before = {o for i in index.order[:at] for o in index.nodes[i].output}
        alive = {n for n in before if any(n in index.node_reads[i] for i in index.order[at:])}
        assert alive and not alive & conversion.main_float16


def test_float32_inside_one_session_is_read_from_onnx_runtimes_graph() -> None:
    # ONNX Runtime's CPU provider has no float16 Relu: it runs both Relus in float32 and removes the
    # Casts it put around them with those at the graph's ends, so none of the float16 tensors exists
    # in its graph
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) {
            a = Relu (x)
            y = Relu (a)
        }""")
    conversion = _mixed.convert_float16(model, keep_io_types=True, keep_op=[], keep_node=[], keep_main={})
    assert "a" in conversion.main_float16
    assert _mixed._float32_inside(conversion.model, conversion.main_float16) == {"x_float16", "a", "y_float16"}


def test_float16_values_cross_fragments_as_one_session_holds_them() -> None:
    # one session computes Relu, Add and Sub in float32 between the Casts it inserts and removes, so
    # the float16 model loses only the weight's rounding (1000.3 held as 1000.5); fragments that
    # passed ``a`` as float16 would round 1000.x to 0.5 as well
    model = rounding_model()
    feeds = {"x": np.array([0.1, 0.2, 0.3, 0.45], np.float32)}
    want = gk.run(gk.to_float16(model, keep_io_types=True), feeds)["y"]
    search = _mixed._Search(model, _mixed.MIXED_TOLERANCE, feeds, gk.FeedOptions(), True, [], [], None,
                            fragment_bytes=8)  # a fragment per node
    search.reference = gk.run(model, feeds)
    got = search._walk(search._convert({}), set())["y"]
    assert search.trial_runs >= 3
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_progress_counts_every_session_run() -> None:
    seen: list[tuple[int, int]] = []
    result = gk.auto_mixed_precision(chain_model(blocks=12, lossy=(3,)), keep_io_types=True,
                                     feed_options=gk.FeedOptions(seed=1), progress=lambda d, t: seen.append((d, t)))
    assert [d for d, _ in seen] == list(range(1, result.runs + 1))
    assert all(d < t for d, t in seen)


def test_cli_fragment_mb_sets_the_search_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "chain.onnx"
    gk.save(chain_model(blocks=12, lossy=(3,)), source)
    runs = []
    for mb in ("64", "0.004"):
        assert main(["convert", str(source), str(tmp_path / f"m{mb}.onnx"), "--float16", "--auto-mixed",
                     "--keep-io-types", "--fragment-mb", mb, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["passed"] and [k["node"] for k in report["kept"]] == ["lossy3"]
        runs.append(report["trial_runs"])
    assert runs[1] > runs[0]  # smaller fragments: more sessions for the same trials
    assert main(["convert", str(source), str(tmp_path / "x.onnx"), "--float16", "--auto-mixed",
                 "--fragment-mb", "0"]) == 2
    assert "--fragment-mb" in capsys.readouterr().err


def test_the_scratch_folders_go_when_the_search_stops_on_an_error_or_ctrl_c(
        monkeypatch: pytest.MonkeyPatch) -> None:
    searches: list[_mixed._Search] = []
    start, walk = _mixed._Search.__init__, _mixed._Search._capture

    def record(self: _mixed._Search, *args: object, **kwargs: object) -> None:
        start(self, *args, **kwargs)  # type: ignore[arg-type]
        searches.append(self)

    def interrupted(self: _mixed._Search, *args: object, **kwargs: object) -> None:
        walk(self, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(_mixed._Search, "__init__", record)
    monkeypatch.setattr(_mixed._Search, "_capture", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        gk.auto_mixed_precision(rounding_model(), keep_io_types=True)
    folders = [searches[0].values.folder, searches[0].store.folder]  # (the search is still alive here)
    assert caught.type is KeyboardInterrupt and searches[0].values.paths == {}
    assert not any(folder.exists() for folder in folders)
