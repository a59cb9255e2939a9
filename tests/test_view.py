"""view: the neighbourhood cut (graphkit._view) and Netron served on localhost, loaded in a real browser."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _browser import browser, open_page
from conftest import ROOT, fixture

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


@pytest.mark.slow
def test_view_serves_the_neighbourhood_to_a_browser_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    pytest.importorskip("netron")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        [sys.executable, "-m", "graphkit", "view", str(fixture("whole_model.onnx")), "--around", "/Add",
         "--depth", "1", "--no-browser"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        lines = []
        for line in server.stdout:
            lines.append(line)
            if line.startswith("Netron: "):
                break
        assert lines[0].startswith("showing 4 of 11 nodes within 1 steps of '/Add'"), lines
        url = re.search(r"http://\S+", lines[-1])
        assert url is not None, lines
        with browser(tmp_path) as context:
            # Netron asks a web service where the user is before showing a cookie notice, unless the
            # notice was seen: say it was, so the page makes no request off localhost.
            context.add_cookies([{"name": "consent", "value": "1", "url": url.group(0)}])
            page = open_page(context, url.group(0))
            page.page.wait_for_selector("g.node", timeout=60_000)
            text = page.page.inner_text("body")
            assert "Add" in text and "Conv" in text
            page.screenshot("view_around_add.png")
            assert page.errors == []
            assert all(r.startswith(url.group(0)) or r.startswith("data:") or r.startswith("blob:")
                       for r in page.requests), page.requests
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err
    assert "stopped" in out
