"""graphkit._report: the comparison's HTML page — its content, and in a real browser: no console error,
no request, the plot and the table render, sorting works (screenshots in test-artifacts/)."""

from __future__ import annotations

import base64
import builtins
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _browser import browser, open_page
from conftest import fixture

import graphkit as gk
from graphkit._report import _figure_json, view_command
from graphkit.cli import main


@pytest.fixture(scope="module")
def add_to_sub() -> tuple[gk.Comparison, gk.Model]:
    """whole_model against a copy whose '/Add' is a Sub: the planted edit."""
    model = gk.load(fixture("whole_model.onnx"))
    edited = gk.set_op_type(model, node="/Add", op_type="Sub")
    return gk.compare(model, edited), edited


def test_failed_tensors_keep_a_value_sample(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    result, _ = add_to_sub
    add = result.tensor("/Add_output_0")
    assert add.sample is not None
    cand, ref = add.sample
    assert cand.shape == ref.shape == (300,)  # 1x3x10x10: every element
    assert float(np.max(np.abs(cand - ref))) == pytest.approx(add.max_abs)
    assert all(t.sample is None for t in result.tensors if t.passed)


def test_page_names_the_verdict_and_the_first_divergence(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    result, edited = add_to_sub
    page = result.to_html(edited)
    assert "FAILED: 4 of 11 tensors out of tolerance (1 local, 3 inherited" in page
    assert re.search(r"node <code>/Add</code> \(Sub\) → tensor <code>/Add_output_0</code>", page)
    assert "python -m graphkit view MODEL.onnx --around /Add --depth 2" in page
    assert page.count("<tr class='passed'>") == 7 and page.count("<tr class='inherited'>") == 3
    assert "Neighbourhood of the first divergence" in page and "values of /Add_output_0" in page


def test_page_loads_nothing_from_anywhere(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    page = add_to_sub[0].to_html()
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=['\"]?https?:", page)
    assert "default-src 'none'" in page  # the Content-Security-Policy forbids any request


def test_plotly_js_is_inlined_once_gzip_packed(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    from plotly.offline import get_plotlyjs

    page = add_to_sub[0].to_html()
    packed = re.search(r"<script type=\"application/gzip\+base64\" id=\"plotlyjs\">([A-Za-z0-9+/=]+)</script>", page)
    assert packed is not None
    assert gzip.decompress(base64.b64decode(packed.group(1))).decode("utf-8") == get_plotlyjs()
    assert "Plotly.newPlot" not in page.replace("Plotly.newPlot(f.getAttribute", "")  # only the loader draws
    assert len(page.encode()) < 0.45 * len(get_plotlyjs().encode())


def test_error_plot_steps_at_add(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    """The planted edit's picture: errors at the log axis's floor up to '/Add', 3.59 there, the first
    divergence marked at that step."""
    result, edited = add_to_sub
    page = result.to_html(edited)
    found = re.search(r"<script type='application/json' class='figure' data-target='plot0'>(.*?)</script>", page)
    assert found is not None
    figure = json.loads(found.group(1))
    errors = next(trace for trace in figure["data"] if trace["name"] == "max abs error")
    at = [t.name for t in result.tensors].index("/Add_output_0")
    assert errors["y"][:at] == [1e-12] * at  # exact agreement, drawn at the floor
    assert errors["y"][at] == pytest.approx(result.tensor("/Add_output_0").max_abs) and errors["y"][at] > 3
    assert "/Add (Sub)" in errors["hovertext"][at]
    marks = [shape["x0"] for shape in figure["layout"]["shapes"] if shape.get("x0") == shape.get("x1")]
    assert set(marks) == {at}  # (drawn across both rows)
    assert any(a["text"] == "first divergence: /Add" for a in figure["layout"]["annotations"])


def test_figure_data_cannot_end_its_script_element() -> None:
    import plotly.graph_objects as go
    import plotly.io as pio

    name = "x</script><!--<script>alert(1)"
    text = _figure_json(pio, go.Figure(go.Scatter(x=[0], y=[1], name=name)))
    assert "<" not in text
    assert json.loads(text)["data"][0]["name"] == name


def test_a_passing_comparison_has_no_divergence_section() -> None:
    page = gk.compare(gk.load(fixture("linear_func.onnx"))).to_html()
    assert re.search(r"PASSED: \d+ tensors within atol", page)
    assert "First divergence" not in page and "Values of the first divergence" not in page


def test_missing_plotly_names_the_extra(monkeypatch: pytest.MonkeyPatch,
                                        add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    real_import = builtins.__import__

    def no_plotly(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("plotly"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
    with pytest.raises(gk.UsageError) as err:
        add_to_sub[0].to_html()
    assert "plotly" in err.value.message and err.value.hint == "pip install graphkit[report]"


def test_view_command_quotes_names(add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    assert view_command(add_to_sub[0], "my model.onnx") == \
        "python -m graphkit view 'my model.onnx' --around /Add --depth 2"


def test_cli_writes_the_report_and_prints_the_view_command(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    edited = tmp_path / "edited.onnx"
    assert main(["edit", str(fixture("whole_model.onnx")), str(edited), "--set-op-type", "/Add=Sub"]) == 0
    report = tmp_path / "report.html"
    assert main(["compare", str(fixture("whole_model.onnx")), str(edited), "--html", str(report)]) == 1
    out = capsys.readouterr().out
    assert f"see it in Netron: python -m graphkit view {edited} --around /Add --depth 2" in out
    assert f"report: {report}" in out
    text = report.read_text(encoding="utf-8")
    assert f"python -m graphkit view {edited} --around /Add --depth 2" in text
    assert 1_800_000 < len(text.encode()) < 2_300_000  # plotly.js, 4.8 MB packed into 2.0 MB, is most of it


def test_cli_refuses_a_report_over_an_input(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(fixture("whole_model.onnx"))
    assert main(["compare", model, "--html", model]) == 2
    assert "refusing" in capsys.readouterr().err


@pytest.mark.slow
def test_report_in_a_browser_loads_offline_renders_and_sorts(
        tmp_path: Path, add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    result, edited = add_to_sub
    path = tmp_path / "report.html"
    path.write_text(result.to_html(edited), encoding="utf-8")
    with browser(tmp_path) as context:
        page = open_page(context, path.as_uri())
        page.page.wait_for_selector("#plot0 .main-svg")
        assert page.page.locator("#plot0 .scatterlayer .point").count() >= 11  # one marker per tensor
        assert page.page.locator("#plot0").inner_text().count("first divergence: /Add") == 1
        rows = page.page.locator("#tensors tbody tr")
        assert rows.count() == 11
        page.page.click("#tensors th:nth-child(7)")  # max abs, ascending
        page.page.click("#tensors th:nth-child(7)")  # descending: the largest error first
        assert rows.nth(0).locator("td").nth(1).inner_text() == "/Add_output_0"  # 3.59
        assert rows.nth(1).locator("td").nth(1).inner_text() == "/convs4/convs4.1/Conv_output_0"  # 2.75
        page.page.fill("#filter", "Sub")
        assert page.page.inner_text("#shown") == "1 of 11 tensors"
        page.page.fill("#filter", "")
        page.page.click("#tensors th:nth-child(1)")
        assert page.page.locator("#plot1 .main-svg").count() > 0  # the values of /Add_output_0
        assert page.page.locator("#plot2 .main-svg").count() > 0  # the neighbourhood
        assert page.page.locator("#plots-missing").is_hidden()
        page.screenshot("compare_report_add_to_sub.png")
        assert page.errors == []
        assert page.requests == [path.as_uri()]


@pytest.mark.slow
def test_report_in_a_browser_without_decompression_says_so_and_the_table_works(
        tmp_path: Path, add_to_sub: tuple[gk.Comparison, gk.Model]) -> None:
    path = tmp_path / "report.html"
    path.write_text(add_to_sub[0].to_html(), encoding="utf-8")
    with browser(tmp_path) as context:
        context.add_init_script("delete window.DecompressionStream;")
        page = open_page(context, path.as_uri())
        page.page.wait_for_selector("#plots-missing", state="visible")
        assert "cannot unpack" in page.page.inner_text("#plots-missing")
        assert page.page.locator("#plot0 .main-svg").count() == 0
        page.page.click("#tensors th:nth-child(7)")
        page.page.click("#tensors th:nth-child(7)")
        assert page.page.locator("#tensors tbody tr").nth(0).locator("td").nth(1).inner_text() == "/Add_output_0"
        assert page.errors == []
        assert page.requests == [path.as_uri()]
