"""Headless Chromium for the tests of the HTML report and the view: the OS package's browser driven
through Playwright (its own browser download is not used), with every console message, page error
and network request recorded, and screenshots kept under ``test-artifacts/`` for a reader."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

ARTIFACTS = ROOT / "test-artifacts"
#: Flags for a quiet browser on a closed network: nothing it does on its own may send a request.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    """The OS package's Chromium (``.ci/run`` installs it), if any."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    """A loaded page and what it did."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [text for kind, text in self.console if kind in ("error", "pageerror")]

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / name
        self.page.screenshot(path=str(path), full_page=True)
        return path


@contextmanager
def browser(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium with a fresh profile; skips the test when Chromium or Playwright is missing."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium installed (.ci/run installs it: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=executable, args=FLAGS, headless=True,
            viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


def open_page(context: Any, url: str) -> Page:
    """Open ``url`` in a new tab, recording console messages, page errors and requests."""
    page = context.new_page()
    result = Page(page)
    page.on("console", lambda message: result.console.append((message.type, message.text)))
    page.on("pageerror", lambda error: result.console.append(("pageerror", str(error))))
    page.on("request", lambda request: result.requests.append(request.url))
    page.goto(url)
    return result
