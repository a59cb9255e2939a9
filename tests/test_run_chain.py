"""graphkit.run_chain: fragments run in order, values handed on, the whole model as reference."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import fixture

import graphkit as gk

TRUNK = "/convs1/convs1.2/Conv_output_0"


def _affine(offset: float) -> gk.Model:
    return gk.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y, float[2, 3] z) {{
            one = Constant <value = float {{{offset}}}> ()
            a = Add(x, one)
            b = Relu(a)
            y = Neg(b)
            z = Mul(a, b)
        }}
    """)


def test_chain_hands_values_on_and_reports_each_fragment(whole_model: gk.Model) -> None:
    result = gk.split(whole_model, at=[TRUNK, "/Add_output_0"])
    chain = gk.run_chain(result, feed_options=gk.FeedOptions(seed=1))
    assert chain.passed and chain.compared and chain.reference == whole_model.name
    assert [f.index for f in chain.fragments] == [0, 1, 2]
    assert [f.nodes for f in chain.fragments] == [3, 5, 3]
    assert chain.fragments[0].peak_output_bytes == 1 * 3 * 14 * 14 * 4
    assert chain.fragments[1].live_bytes == 1 * 3 * 10 * 10 * 4  # the trunk was dropped after use
    assert chain.fragments[2].live_bytes == 1 * 3 * 4 * 4 * 4  # only the final output is held
    assert chain.peak_live_bytes == 1 * 3 * 14 * 14 * 4
    assert all(f.run_seconds >= 0 and f.load_seconds > 0 for f in chain.fragments)
    assert chain.whole_run_seconds is not None
    (diff,) = chain.diffs
    assert diff.name == "output" and diff.max_abs is not None and diff.max_abs <= 1e-5
    data = chain.to_dict()
    assert data["ok"] is True and len(data["fragments"]) == 3 and data["outputs"][0]["shape"] == [1, 3, 4, 4]


def test_chain_of_plain_models_with_given_feeds() -> None:
    model = _affine(1.0)
    result = gk.split(model, at=["a", "b"])
    models = [f.model for f in result]
    x = np.array([[-3, -1, 0], [1, 2, 3]], dtype=np.float32)
    chain = gk.run_chain(models, {"x": x})
    assert not chain.compared and chain.passed and not chain.exact
    a = x + 1
    np.testing.assert_array_equal(chain.outputs["y"], -np.maximum(a, 0))
    np.testing.assert_array_equal(chain.outputs["z"], a * np.maximum(a, 0))
    compared = gk.run_chain(models, {"x": x}, reference=model)
    assert compared.exact


def test_chain_detects_a_mismatch() -> None:
    chain = gk.run_chain(gk.split(_affine(1.0), parts=3), reference=_affine(1.5), feed_options=gk.FeedOptions(seed=2))
    assert chain.compared and not chain.passed
    by_name = {d.name: d for d in chain.diffs}
    assert by_name["y"].max_abs is not None and by_name["y"].max_abs >= 0.5 - 1e-6
    assert not by_name["y"].passed and not by_name["y"].exact


def test_chain_feed_errors_are_clear(whole_model: gk.Model) -> None:
    result = gk.split(whole_model, parts=2)
    with pytest.raises(gk.FeedError) as err:
        gk.run_chain(result, {"input": np.zeros((1, 3, 20, 20), np.float32)})
    assert "'input'" in err.value.message and "did you mean 'input.1'" in err.value.hint
    with pytest.raises(gk.FeedError, match="dim 2 is fixed to 20"):
        gk.run_chain(result, {"input.1": np.zeros((1, 3, 10, 10), np.float32)})


def test_fragments_out_of_order_name_the_missing_tensor(whole_model: gk.Model) -> None:
    models = [f.model for f in gk.split(whole_model, parts=2)]
    with pytest.raises(gk.UsageError) as err:
        gk.run_chain([models[1], models[0]], {"input.1": np.zeros((1, 3, 20, 20), np.float32)}, reference=None)
    message = err.value.message
    assert "fragment 0" in message and "which fragment 1 computes after it" in message
    assert "'/convs1/convs1.2/Conv_output_0'" in message or "'/Add_output_0'" in message
    assert "in the order" in err.value.hint
    with pytest.raises(gk.UsageError, match="no fragments"):
        gk.run_chain([])


def test_dynamic_batch_flows_through_the_chain() -> None:
    model = gk.load(fixture("ext_weights/model.onnx"))
    chain = gk.run_chain(gk.split(model, parts=3), opt_level="disable", feed_options=gk.FeedOptions(dims={"batch": 4}))
    assert chain.exact and chain.outputs["y"].shape == (4, 16)
    assert chain.feeds[0].chosen_dims == {"batch": "4 (--dim)"}


def test_run_chain_refuses_an_array_as_reference() -> None:
    from graphkit.errors import ArgumentTypeError

    whole = gk.load(fixture("whole_model.onnx"))
    with pytest.raises(ArgumentTypeError, match="reference= must be a Model"):
        gk.run_chain(gk.split(whole, parts=2), reference=np.array([1, 2]))


def _float16_stack() -> gk.Model:
    """Eight blocks of float16 Conv, Sigmoid·x, Softmax and LayerNormalization (kernels ONNX Runtime's
    CPU runs in float32 behind inserted casts)."""
    rng = np.random.default_rng(0)
    b = gk.GraphBuilder("fp16")
    t = b.input("x", "float16", [1, 8, 16, 16])
    for k in range(8):
        w = b.initializer((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float16), f"w{k}")
        c = b.node("Conv", [t, w], name=f"/conv{k}", outputs=[f"c{k}"], pads=[1, 1, 1, 1])
        t = b.node("Mul", [b.node("Sigmoid", [c], name=f"/sig{k}", outputs=[f"s{k}"]), c], name=f"/mul{k}",
                   outputs=[f"m{k}"])
        if k % 3 == 0:
            t = b.node("Softmax", [t], name=f"/softmax{k}", outputs=[f"softmax{k}"], axis=1)
        if k % 2 == 0:
            scale = b.initializer(np.ones(16, np.float16), f"g{k}")
            t = b.node("LayerNormalization", [t, scale], name=f"/ln{k}", outputs=[f"ln{k}"], axis=-1)
    b.output(t, "float16", [1, 8, 16, 16])
    return b.build()


def test_a_float16_chain_is_held_to_a_float16_tolerance_and_a_float32_one_is_exact(whole_model: gk.Model) -> None:
    model = _float16_stack()
    chain = gk.run_chain(gk.split(model, parts=4), reference=model, opt_level="disable")
    (diff,) = chain.diffs
    assert chain.passed and not diff.exact  # a cut rounds to float16 where the whole model kept float32
    assert diff.max_abs is not None and 0 < diff.max_abs <= 1e-2
    assert diff.note == "float16 tolerance: atol 0.01, rtol 0.01"
    exact = gk.run_chain(gk.split(whole_model, parts=4), reference=whole_model, opt_level="disable")
    assert exact.passed and exact.exact
    assert gk.Tolerance().for_dtype("float32") == gk.Tolerance()
    assert gk.Tolerance(1e-5, 1e-3).for_dtype("float16") == gk.Tolerance(1e-2, 1e-2)


@pytest.mark.parametrize("dtype", ["float", "int64", "bool"])
def test_a_chain_with_scalar_inputs_runs_on_generated_values(dtype: str) -> None:
    # numpy's generators give a scalar, not an array, for shape (): ONNX Runtime refused it ("Unable to
    # handle object of type <class 'numpy.float32'>"; found on the onnx wheel's test_gradient_of_add_and_mul)
    model = gk.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g ({dtype} a, {dtype} b) => ({dtype} d) {{ c = Identity (a)
            d = Identity (c) }}""")
    chain = gk.run_chain(gk.split(model, parts=2), feed_options=gk.FeedOptions(seed=1))
    assert chain.passed and chain.outputs["d"].shape == ()
