"""Fixtures for the documentation tests: the built site and a headless Chromium.

Fixtures:
    built_site   session   Path of a site built once with `mkdocs build --strict` into a temp dir
    browser      module    a Playwright Chromium (Debian's /usr/bin/chromium); tests that use it
                           are marked `browser` and skip when Chromium or Playwright is missing
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Import the helpers beside this file whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from docs_helpers import CHROMIUM, CHROMIUM_ARGS, build_site  # noqa: E402


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = build_site(site)
    if result.returncode != 0:
        pytest.fail(f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}")
    return site


# Per module, so that Chromium is closed right after the tests that use it, not at the end of
# the session, after tests that start and kill many processes (a Chromium kept that long has been
# seen to hang playwright's close past the faulthandler timeout).
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pip install playwright)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
