"""graphkit._run: feeds (generated, given, checked), outputs, external weights, statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture

import graphkit as gk
from graphkit import _ort
from graphkit._io import inline_proto, load_bytes
from graphkit._run import FeedSpec, index_bounds, input_specs, plan_feeds, run_detailed, session, tensor_stats


def _conv_reference(model: gk.Model, x: np.ndarray) -> np.ndarray:
    """The fixtures' single 3×3 Conv computed with numpy, from the model's own weights."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w, b = inits["conv.weight"], inits["conv.bias"]
    n, _, h, wd = x.shape
    out = np.zeros((n, w.shape[0], h - 2, wd - 2), dtype=np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", x[:, :, i : i + h - 2, j : j + wd - 2], w[:, :, i, j])
    return out + b[None, :, None, None]


# ------------------------------------------------------------------------------ generated feeds


def test_generated_feeds_are_reproducible_by_seed() -> None:
    model = gk.load(fixture("linear_func.onnx"))
    first = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=7))
    again = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=7))
    other = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=8))
    assert set(first) == {"a", "x", "b"}
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
        assert first[name].dtype == np.float32 and first[name].shape == (10, 10)
        assert not np.array_equal(first[name], other[name])
        assert first[name].min() >= -1 and first[name].max() <= 1
    assert gk.run(model, feed_options=gk.FeedOptions(seed=7))["output"].tolist() == gk.run(model, feed_options=gk.FeedOptions(seed=7))["output"].tolist()


def test_giving_one_input_does_not_change_the_generated_others() -> None:
    model = gk.load(fixture("linear_func.onnx"))
    alone = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=3))
    with_a = gk.make_feeds(model, {"a": np.ones((10, 10), np.float32)}, feed_options=gk.FeedOptions(seed=3))
    np.testing.assert_array_equal(alone["x"], with_a["x"])
    np.testing.assert_array_equal(alone["b"], with_a["b"])
    np.testing.assert_array_equal(with_a["a"], np.ones((10, 10)))


def test_run_computes_a_times_x_plus_b_by_value() -> None:
    model = gk.load(fixture("linear_func.onnx"))
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1))
    out = gk.run(model, feeds)["output"]
    np.testing.assert_allclose(out, feeds["a"] * feeds["x"] + feeds["b"], rtol=1e-6)


@pytest.mark.parametrize(
    ("dtype", "lo", "hi"),
    [("float32", -1, 1), ("float16", -1, 1), ("float64", -1, 1), ("int64", 0, 9), ("int32", 0, 9),
     ("uint8", 0, 9), ("bool", 0, 1)],
)
def test_generated_values_have_the_right_dtype_and_range(dtype: str, lo: float, hi: float) -> None:
    spec = FeedSpec("t", np.dtype(dtype), [4, 50])
    values, notes = plan_feeds([spec], feed_options=gk.FeedOptions(seed=0))
    value = values["t"]
    assert value.dtype == np.dtype(dtype) and value.shape == (4, 50)
    assert value.min() >= lo and value.max() <= hi
    assert notes[0].source == "generated" and (notes[0].low, notes[0].high) == (lo, hi)


def test_ranges_are_respected_for_floats_and_ints() -> None:
    specs = [FeedSpec("f", np.dtype("float32"), [1000]), FeedSpec("i", np.dtype("int64"), [1000])]
    values, _ = plan_feeds(specs, feed_options=gk.FeedOptions(ranges={"f": (5.0, 6.0), "i": (100, 103)}))
    assert values["f"].min() >= 5 and values["f"].max() <= 6
    assert set(np.unique(values["i"]).tolist()) == {100, 101, 102, 103}  # integer ranges are inclusive


def test_int_and_bool_inputs_run_through_onnx_runtime() -> None:
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[3] idx, bool[3] keep, float[10] table) => (float[3] out) {
            picked = Gather(table, idx)
            zeros = Sub(picked, picked)
            out = Where(keep, picked, zeros)
        }
    """)
    values, _ = plan_feeds(input_specs(model), feed_options=gk.FeedOptions(seed=0, ranges={"idx": (0, 9)}))
    out = gk.run(model, values)["out"]
    expected = np.where(values["keep"], values["table"][values["idx"]], 0)
    np.testing.assert_array_equal(out, expected)


# ------------------------------------------------------------------------------ dynamic dims


def test_dynamic_dim_defaults_to_one_and_says_so() -> None:
    model = gk.load(fixture("model_dynamic_0.onnx"))
    result = run_detailed(model)
    (note,) = result.feeds
    assert note.shape == (1, 3, 10, 10)
    assert note.chosen_dims == {"batch": "1 (default; set it with --shape or --dim)"}
    assert result.outputs["out"].shape == (1, 3, 8, 8)


def test_a_dim_declared_0_is_generated_empty_and_kept_fixed() -> None:
    # the onnx wheel's Reduce* tests take an int64[0] 'axes': a generated [1] made ONNX Runtime refuse
    # every run ("Got invalid dimensions for input: axes"), so run, simplify and convert could not check it
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 18]>
        g (float[3, 2] data, int64[0] axes) => (float[1, 1] y) { y = ReduceSum <keepdims = 1> (data, axes) }""")
    result = run_detailed(model)
    assert result.feeds[1].shape == (0,) and result.outputs["y"].shape == (1, 1)
    with pytest.raises(gk.FeedError, match="dim 0 is fixed to 0"):
        gk.run(model, {"data": np.ones((3, 2), np.float32), "axes": np.array([1])})


def test_named_dim_from_dims_and_from_a_given_feed() -> None:
    spec_a = FeedSpec("a", np.dtype("float32"), ["batch", 4])
    spec_b = FeedSpec("b", np.dtype("float32"), ["batch", None])
    values, notes = plan_feeds([spec_a, spec_b], feed_options=gk.FeedOptions(dims={"batch": 5}))
    assert values["a"].shape == (5, 4) and values["b"].shape == (5, 1)
    assert notes[1].chosen_dims == {"batch": "5 (--dim)", "dim 1": "1 (default; set it with --shape or --dim)"}
    values, notes = plan_feeds([spec_a, spec_b], {"a": np.zeros((3, 4), np.float32)})
    assert values["b"].shape == (3, 1)
    assert notes[1].chosen_dims["batch"] == "3 (from 'a')"


SEED_SHAPES = {
    "model_static.onnx": {"accept": [(1, 3, 10, 10)], "reject": [(2, 3, 10, 10), (1, 3, 20, 20)]},
    "model_dynamic_0.onnx": {"accept": [(1, 3, 10, 10), (2, 3, 10, 10)], "reject": [(1, 3, 20, 20)]},
    "model_dynamic_23.onnx": {"accept": [(1, 3, 10, 10), (1, 3, 20, 20)], "reject": [(2, 3, 10, 10)]},
}


@pytest.mark.parametrize("name", sorted(SEED_SHAPES))
def test_dynamic_axes_fixtures_accept_exactly_the_seed_shapes(name: str) -> None:
    model = gk.load(fixture(name))
    rng = np.random.default_rng(0)
    for shape in SEED_SHAPES[name]["accept"]:
        x = rng.standard_normal(shape).astype(np.float32)
        out = gk.run(model, {"in": x})["out"]
        assert out.shape == (shape[0], 3, shape[2] - 2, shape[3] - 2)
        np.testing.assert_allclose(out, _conv_reference(model, x), rtol=1e-4, atol=1e-4)
        assert gk.run(model, feed_options=gk.FeedOptions(shapes={"in": shape}))["out"].shape == out.shape
    for shape in SEED_SHAPES[name]["reject"]:
        x = np.zeros(shape, np.float32)
        with pytest.raises(gk.FeedError) as err:
            gk.run(model, {"in": x})
        message = str(err.value)
        assert "'in'" in message and "float32" in message and str(list(shape)) in message
        assert "is fixed to" in message and err.value.hint
        with pytest.raises(gk.FeedError, match="is fixed to"):
            gk.run(model, feed_options=gk.FeedOptions(shapes={"in": shape}))


def test_wrong_dtype_names_input_expected_and_given() -> None:
    model = gk.load(fixture("model_static.onnx"))
    with pytest.raises(gk.FeedError) as err:
        gk.run(model, {"in": np.zeros((1, 3, 10, 10), np.float64)})
    assert "'in'" in err.value.message and "expects float32 [1, 3, 10, 10]" in err.value.message
    assert "got float64 [1, 3, 10, 10]" in err.value.message
    assert "astype('float32')" in err.value.hint


def test_wrong_rank_names_both_shapes() -> None:
    model = gk.load(fixture("model_dynamic_0.onnx"))
    with pytest.raises(gk.FeedError) as err:
        gk.run(model, {"in": np.zeros((3, 10, 10), np.float32)})
    assert "rank 4 [batch, 3, 10, 10]" in err.value.message and "[3, 10, 10] (rank 3)" in err.value.message
    assert err.value.hint


def test_unknown_feed_name_suggests_the_close_one() -> None:
    model = gk.load(fixture("model_static.onnx"))
    for kwargs in ({"feeds": {"inn": np.zeros((1, 3, 10, 10), np.float32)}},
                   {"feed_options": gk.FeedOptions(shapes={"inn": (1, 3, 10, 10)})},
                   {"feed_options": gk.FeedOptions(ranges={"inn": (0, 1)})}):
        with pytest.raises(gk.FeedError) as err:
            gk.run(model, **kwargs)  # type: ignore[arg-type]
        assert "'inn'" in err.value.message and "did you mean 'in'" in err.value.hint
        assert isinstance(err.value, ValueError)


def test_unranked_input_needs_a_shape() -> None:
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float x) => (float y) { y = Relu(x) }
    """)
    del model.graph.input[0].type.tensor_type.shape.dim[:]
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(gk.FeedError) as err:
        gk.make_feeds(model)
    assert "'x'" in err.value.message and "--shape x=" in (err.value.cli_hint or "") and "shapes={'x'" in (err.value.hint or "")
    assert gk.run(model, feed_options=gk.FeedOptions(shapes={"x": (2, 2)}))["y"].shape == (2, 2)


# ------------------------------------------------------------------------------------- outputs


def test_outputs_can_select_and_expose_intermediate_tensors(whole_model: gk.Model) -> None:
    before = whole_model.proto.SerializeToString()
    full = gk.run(whole_model, feed_options=gk.FeedOptions(seed=2))
    picked = gk.run(whole_model, outputs=["/Add_output_0", "output"], feed_options=gk.FeedOptions(seed=2))
    assert list(picked) == ["/Add_output_0", "output"]
    np.testing.assert_array_equal(picked["output"], full["output"])
    assert picked["/Add_output_0"].shape == (1, 3, 10, 10)
    assert whole_model.proto.SerializeToString() == before


def test_unknown_output_is_a_clear_error(whole_model: gk.Model) -> None:
    with pytest.raises(gk.TensorNotFoundError) as err:
        gk.run(whole_model, outputs=["/Add_output"])
    assert "'/Add_output'" in err.value.message and "did you mean" in err.value.hint


def test_unknown_provider_and_opt_level_are_usage_errors(whole_model: gk.Model) -> None:
    with pytest.raises(gk.UsageError) as err:
        gk.run(whole_model, provider="nope")
    assert "'nope'" in err.value.message and "CPUExecutionProvider" in err.value.message and err.value.hint
    with pytest.raises(gk.UsageError, match="opt_level"):
        gk.run(whole_model, opt_level="max")


def test_runtime_refusal_is_a_runtime_failure() -> None:
    model = gk.load(fixture("dcn.onnx"))
    with pytest.raises(gk.RuntimeFailure) as err:
        gk.run(model)
    assert "dcn.onnx" in err.value.message and err.value.hint


# ---------------------------------------------------------------------------- external weights


def test_external_weights_run_from_where_they_lie(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    weights = (ext_copy.parent / "model.data").stat().st_size
    assert len(model.serialized()) < weights / 10  # the session gets the graph, not the weights
    out = gk.run(model, feed_options=gk.FeedOptions(seed=4, dims={"batch": 3}))["y"]
    expected = gk.run(load_bytes(inline_proto(model).SerializeToString()), feed_options=gk.FeedOptions(seed=4, dims={"batch": 3}))["y"]
    np.testing.assert_array_equal(out, expected)
    assert out.shape == (3, 16)


def test_session_of_a_moved_model_finds_its_weights(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    sess = session(model, opt_level="disable")
    assert [i.name for i in sess.get_inputs()] == ["x"]


# ------------------------------------------------------------------------------------ statistics


def test_tensor_stats_by_value() -> None:
    value = np.array([[1.0, 2.0], [np.nan, np.inf]], dtype=np.float32)
    stats = tensor_stats("t", value)
    assert (stats.min, stats.max, stats.mean, stats.nan, stats.inf) == (1.0, 2.0, 1.5, 1, 1)
    assert stats.to_dict()["shape"] == [2, 2] and stats.nbytes == 16
    assert tensor_stats("s", np.array(["a"], dtype=object)).min is None
    assert tensor_stats("b", np.array([True, False])).mean == 0.5


def test_run_fragment_runs_a_fed_piece_and_names_a_failure(whole_model: gk.Model) -> None:
    from graphkit._run import run_fragment

    feeds = gk.make_feeds(whole_model, feed_options=gk.FeedOptions(seed=3))
    want = ["output", "/Add_output_0"]
    assert {k: v.shape for k, v in run_fragment(whole_model, feeds, want).items()} == {
        k: v.shape for k, v in gk.run(whole_model, feeds, outputs=want).items()}
    np.testing.assert_array_equal(run_fragment(whole_model, feeds, want)["output"],
                                  gk.run(whole_model, feeds, outputs=want)["output"])
    wrong = {name: value.astype(np.float64) for name, value in feeds.items()}
    with pytest.raises(gk.RuntimeFailure) as info:
        run_fragment(whole_model, wrong, ["output"])
    assert whole_model.name in info.value.message


@pytest.mark.parametrize("threads", [100_000, -1, True, 2.5])
def test_threads_are_bounded_before_a_session_starts(whole_model: gk.Model, threads: object) -> None:
    with pytest.raises(gk.UsageError, match="threads") as err:
        gk.run(whole_model, threads=threads)  # type: ignore[arg-type]
    assert err.value.hint


# ---------------------------------------------------------------------------------- providers

_HAS_CUDA = "CUDAExecutionProvider" in _ort.available_providers()


def test_cpu_provider_by_short_or_full_name_computes_the_same(whole_model: gk.Model) -> None:
    options = gk.FeedOptions(seed=5)
    short = gk.run_detailed(whole_model, feed_options=options, provider="cpu")
    full = gk.run_detailed(whole_model, feed_options=options, provider="CPUExecutionProvider",
                           provider_options={"arena_extend_strategy": "kSameAsRequested"})
    np.testing.assert_array_equal(short.outputs["output"], full.outputs["output"])
    assert full.provider == "CPUExecutionProvider (arena_extend_strategy=kSameAsRequested)"


@pytest.mark.parametrize("call", [
    lambda m: gk.run(m, provider="cuda"),
    lambda m: gk.run_chain([m], provider="tensorrt", reference=None),
    lambda m: gk.compare(m, candidate_provider="cuda"),
    lambda m: gk.compare(m, m, reference_provider="openvino"),
])
def test_an_unavailable_provider_names_the_available_ones(whole_model: gk.Model, call: object) -> None:
    if _HAS_CUDA:
        pytest.skip("this machine has CUDA")
    with pytest.raises(gk.UsageError) as err:
        call(whole_model)  # type: ignore[operator]
    assert "no provider" in err.value.message and "CPUExecutionProvider" in err.value.message
    assert "provider=" in err.value.hint and "--" not in err.value.hint  # (the API's words)
    assert err.value.cli_hint is not None and "--provider" in err.value.cli_hint


def test_provider_options_are_checked_by_keyword(whole_model: gk.Model) -> None:
    with pytest.raises(gk.ArgumentTypeError, match="provider_options"):
        gk.run(whole_model, provider_options={"device_id": None})  # type: ignore[dict-item]
    with pytest.raises(gk.ArgumentTypeError, match="custom_ops"):
        gk.run(whole_model, custom_ops="lib.so")  # type: ignore[arg-type]


@pytest.mark.skipif(not _HAS_CUDA, reason="ONNX Runtime here has no CUDAExecutionProvider (no GPU or no onnxruntime-gpu)")
def test_cuda_agrees_with_cpu_within_tolerance(whole_model: gk.Model) -> None:
    result = gk.compare(whole_model, backend="ort", reference_provider="cpu", candidate_provider="cuda",
                        provider_options={"device_id": "0"}, tolerance=gk.Tolerance(atol=1e-4, rtol=1e-3))
    assert result.passed and "cuda" in result.candidate
    cpu = gk.run(whole_model, feed_options=gk.FeedOptions(seed=1))["output"]
    gpu = gk.run(whole_model, feed_options=gk.FeedOptions(seed=1), provider="cuda")["output"]
    np.testing.assert_allclose(gpu, cpu, atol=1e-4, rtol=1e-3)


# ------------------------------------------------------------------------------ integer inputs


def _token_model() -> gk.Model:
    """Embedding lookups: ids (Cast, Unsqueeze) index a 7-row table; type ids index a 2-row table."""
    return gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (int64[1, seq] ids, int32[1, seq] type_ids) => (float[1, seq, 1, 4] out) {
            table = Constant <value = float[7, 4] {0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27}> ()
            types = Constant <value = float[2, 4] {100,100,100,100,200,200,200,200}> ()
            axes = Constant <value = int64[1] {2}> ()
            wide = Cast <to = 7> (type_ids)
            one = Unsqueeze (ids, axes)
            emb = Gather <axis = 0> (table, one)
            typ = Gather <axis = 0> (types, wide)
            typ4 = Unsqueeze (typ, axes)
            out = Add (emb, typ4)
        }
    """)


def test_generated_indices_stay_within_the_table_they_index() -> None:
    model = _token_model()
    assert index_bounds(model) == {"ids": 7, "type_ids": 2}
    result = gk.run_detailed(model, feed_options=gk.FeedOptions(seed=0, dims={"seq": 64}))
    assert result.inputs["type_ids"].max() == 1 and result.inputs["ids"].max() == 6
    b = gk.GraphBuilder("emb")
    ids = b.input("ids", "int64", [1, "seq"])
    table = b.initializer(np.arange(28, dtype=np.float32).reshape(7, 4), "table")
    b.output(b.node("Gather", [table, b.node("Cast", [ids], name="/cast", outputs=["c"], to=7)], name="/gather",
                    outputs=["out"]), "float32", [1, "seq", 4])
    model = b.build()
    assert index_bounds(model) == {"ids": 7}
    result = gk.run_detailed(model, feed_options=gk.FeedOptions(seed=1, shapes={"ids": [1, 500]}))
    (note,) = result.feeds
    assert (note.low, note.high) == (0.0, 6.0)
    assert set(np.unique(result.inputs["ids"]).tolist()) == set(range(7))
    own = gk.run_detailed(model, feed_options=gk.FeedOptions(ranges={"ids": (2, 3)}, shapes={"ids": [1, 50]}))
    assert set(np.unique(own.inputs["ids"]).tolist()) == {2, 3}  # a range of one's own wins


def test_an_index_out_of_range_hints_at_range_value_and_input() -> None:
    b = gk.GraphBuilder("emb")
    ids = b.input("ids", "int64", [3])
    b.output(b.node("Gather", [b.initializer(np.zeros((4, 2), np.float32), "table"), ids], name="/g",
                    outputs=["out"]), "float32", [3, 2])
    with pytest.raises(gk.RuntimeFailure) as err:
        gk.run(b.build(), {"ids": np.array([0, 1, 9])})
    assert "--range" in (err.value.cli_hint or "") and "--value" in (err.value.cli_hint or "")
    assert "ranges=" in (err.value.hint or "") and "--" not in (err.value.hint or "")


def test_an_integer_range_without_a_whole_number_is_a_feed_error() -> None:
    with pytest.raises(gk.FeedError) as err:
        plan_feeds([FeedSpec("i", np.dtype("int64"), [3])], feed_options=gk.FeedOptions(ranges={"i": (0.2, 0.7)}))
    assert "'i'" in err.value.message and "--range i=0,1" in (err.value.cli_hint or "") and "ranges={'i': (0, 1)}" in (err.value.hint or "")
