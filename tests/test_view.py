"""view: the neighbourhood cut (graphkit._view) and Netron served on localhost, loaded in a real browser."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from _browser import browser, open_page
from conftest import ROOT, fixture
from onnx import TensorProto, helper, numpy_helper

import graphkit as gk
from graphkit._graph import GraphIndex
from graphkit._view import around_nodes, neighbourhood
from graphkit.cli import main


def test_neighbourhood_keeps_the_nodes_within_depth() -> None:
    cut = neighbourhood(gk.load(fixture("whole_model.onnx")), "/Add", depth=1)
    names = [n.name for n in cut.model.proto.graph.node]
    assert sorted(names) == ["/Add", "/convs2/convs2.1/Conv", "/convs3/convs3.1/Conv", "/convs4/convs4.0/Conv"]
    assert cut.centre == "/Add" and (cut.nodes, cut.total) == (4, 11)
    assert set(cut.inputs) == {"/convs2/convs2.0/Conv_output_0", "/convs3/convs3.0/Conv_output_0"}
    assert cut.outputs == ("/convs4/convs4.0/Conv_output_0",)
    assert gk.validate(cut.model).passed


def test_a_tensor_centres_on_its_producer_and_depth_0_is_the_node_alone() -> None:
    cut = neighbourhood(gk.load(fixture("whole_model.onnx")), "/Add_output_0", depth=0)
    assert [n.name for n in cut.model.proto.graph.node] == ["/Add"]


def test_around_nodes_signs_distances() -> None:
    model = gk.load(fixture("whole_model.onnx"))
    index = GraphIndex(model.proto.graph)
    start = index.node_index("/Add")
    assert start is not None
    distances = {index.nodes[i].name: d for i, d in around_nodes(index, start, 2).items()}
    assert distances["/Add"] == 0 and distances["/convs3/convs3.1/Conv"] == -1
    assert distances["/convs3/convs3.0/Conv"] == -2 and distances["/convs4/convs4.1/Conv"] == 2


def _loop_model() -> gk.Model:
    """x → Relu → Loop (body: Mul, Add; named '/loop/body/Mul', '/loop/body/Add') → Sigmoid → y."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"], name="/loop/body/cond"),
         helper.make_node("Mul", ["acc", "two"], ["m"], name="/loop/body/Mul"),
         helper.make_node("Add", ["m", "one"], ["acc_out"], name="/loop/body/Add")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([2, 2], np.float32), "two"),
         numpy_helper.from_array(np.array([1, 1], np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="/relu"),
         helper.make_node("Loop", ["trips", "", "r"], ["l"], name="/loop/Loop", body=body),
         helper.make_node("Sigmoid", ["l"], ["y"], name="/sigmoid")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array(3, np.int64), "trips")])
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("name", ["/loop/body/Mul", "m"])
def test_a_name_inside_a_loop_body_centres_on_the_loop(name: str) -> None:
    model = _loop_model()
    cut = neighbourhood(model, name, depth=1)
    assert (cut.centre, cut.inside) == ("/loop/Loop", name)
    assert [n.name for n in cut.model.proto.graph.node] == ["/relu", "/loop/Loop", "/sigmoid"]
    x = np.array([-1.0, 0.5], np.float32)
    np.testing.assert_allclose(gk.run(cut.model, {"x": x})["y"], gk.run(model, {"x": x})["y"], rtol=1e-6)
    assert neighbourhood(model, "/loop/Loop", depth=1).inside is None


def test_view_says_a_body_node_is_shown_through_its_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("netron")
    path = tmp_path / "loop.onnx"
    gk.save(_loop_model(), path)

    def stop_at_once(seconds: float) -> None:
        raise KeyboardInterrupt  # (Ctrl-C as soon as the page is served)

    import time
    from types import SimpleNamespace

    import graphkit.cli.view as view_cli

    monkeypatch.setattr(view_cli, "time", SimpleNamespace(sleep=stop_at_once, time=time.time))
    assert main(["view", str(path), "--around", "/loop/body/Mul", "--depth", "1", "--no-browser"]) == 0
    out = capsys.readouterr().out
    assert "'/loop/body/Mul' is inside a body of '/loop/Loop': showing that node" in out
    assert "showing 3 of 3 nodes within 1 steps of '/loop/Loop'" in out and out.rstrip().endswith("stopped")
    address = re.search(r"Netron: (http://\S+)", out)
    assert address is not None
    with pytest.raises(OSError):  # the server was stopped (refused, or reset when the listening socket closes)
        urllib.request.urlopen(address.group(1) + "/", timeout=5)


def test_an_unknown_name_is_exit_2_with_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(fixture("whole_model.onnx")), "--around", "/Ad", "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert "no node or tensor named '/Ad'" in err and "did you mean '/Add'" in err


def test_depth_without_around_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(fixture("whole_model.onnx")), "--depth", "3", "--no-browser"]) == 2
    assert "--depth applies to --around" in capsys.readouterr().err


def test_missing_netron_names_the_extra(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "netron", None)  # import netron -> ImportError
    assert main(["view", str(fixture("whole_model.onnx")), "--no-browser"]) == 2
    assert "hint: pip install graphkit[view]" in capsys.readouterr().err


def _start_view(env_tmp: Path, *extra: str) -> tuple[subprocess.Popen[str], list[str], str]:
    """``python -m graphkit view whole_model.onnx --around /Add --depth 1 --no-browser`` in a child
    whose temporary folders go under ``env_tmp``; returns it, its first lines and the page's URL."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", "TMPDIR": str(env_tmp)}
    server = subprocess.Popen(
        [sys.executable, "-m", "graphkit", "view", str(fixture("whole_model.onnx")), "--around", "/Add",
         "--depth", "1", "--no-browser", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    lines = []
    for line in server.stdout:
        lines.append(line)
        if line.startswith("Netron: "):
            break
    found = re.search(r"http://\S+", lines[-1])
    assert found is not None, (lines, server.stderr.read() if server.poll() is not None and server.stderr else "")
    return server, lines, found.group(0)


def test_the_served_page_allows_requests_to_localhost_only_and_skips_the_consent_lookup() -> None:
    netron = pytest.importorskip("netron")
    from graphkit.cli.view import CONTENT_POLICY, serve, url

    address = serve(netron, fixture("whole_model.onnx"), 0, browse=False)
    try:
        with urllib.request.urlopen(url(address) + "/", timeout=30) as response:
            page = response.read().decode("utf-8")
            assert response.headers["Content-Security-Policy"] == CONTENT_POLICY
            assert response.headers["Set-Cookie"].startswith("consent=")
        assert '<meta name="version" content="0.0.0">' in page  # Netron's development build: no usage reports
        assert '<meta name="file" content="/data/whole_model.onnx">' in page
    finally:
        netron.stop(address)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_the_server_and_removes_the_cut(signum: int, tmp_path: Path) -> None:
    pytest.importorskip("netron")
    server, _, address = _start_view(tmp_path)
    try:
        with urllib.request.urlopen(address + "/", timeout=30) as response:
            assert response.status == 200
        cut = [p.name for p in tmp_path.glob("graphkit-view-*/*.onnx")]
        assert cut == ["around_Add.onnx"]
    finally:
        server.send_signal(signum)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert out.strip().endswith("stopped")
    assert list(tmp_path.iterdir()) == []  # the folder of the cut is gone
    with pytest.raises(OSError):
        urllib.request.urlopen(address + "/", timeout=5)


@pytest.mark.slow
def test_view_serves_the_neighbourhood_to_a_browser_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    pytest.importorskip("netron")
    (tmp_path / "tmp").mkdir()
    server, lines, address = _start_view(tmp_path / "tmp")
    try:
        assert lines[0].startswith("showing 4 of 11 nodes within 1 steps of '/Add'"), lines
        with browser(tmp_path) as context:  # (a fresh profile: no cookie of an earlier visit)
            page = open_page(context, address)
            page.page.wait_for_selector("g.node", timeout=60_000)
            text = page.page.inner_text("body")
            assert "Add" in text and "Conv" in text
            assert "cookies" not in text  # Netron's consent notice is not shown
            page.screenshot("view_around_add.png")
            assert page.errors == []
            # Whatever a page of this server tries beyond it, the browser refuses without a request
            # (asked from a page of the server without Netron's script, which forbids evaluating any).
            probe = open_page(context, address + "/no-such-page")
            refused = probe.page.evaluate(
                "() => fetch('https://ipinfo.io/json').then(() => 'sent', (e) => 'refused: ' + e.name)")
            assert refused == "refused: TypeError"
            assert any("Content Security Policy" in e for e in probe.errors), probe.errors
            assert [r for r in probe.requests if not r.startswith(address)] == [], probe.requests
            assert all(r.startswith(address) or r.startswith("data:") or r.startswith("blob:")
                       for r in page.requests), page.requests
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert "stopped" in out


def test_a_netron_built_otherwise_is_refused_rather_than_served(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from graphkit.cli.view import CHECKED_NETRON, serve

    unknown = SimpleNamespace(__version__="99.0.0", server=SimpleNamespace())  # no request handler to extend
    with pytest.raises(gk.UsageError) as err:
        serve(unknown, fixture("whole_model.onnx"), 0, browse=False)
    assert "this Netron (99.0.0) cannot be served with its usage reporting off" in err.value.message
    assert err.value.hint == f"pip install netron=={CHECKED_NETRON} (the release graphkit's view is checked with)"
