"""The screenshots of docs/report.md: `guideloom report` of the five kinds of dataset the tests
open (tests/docs/report_datasets.py), captured in headless Chromium (PNGs, checked in).

Usage::

    python scripts/docs/report_screenshots.py            # rewrite docs/assets/report-*.png
    python scripts/docs/report_screenshots.py --keep DIR # also keep the datasets and pages in DIR

Needs the ``ray`` extra (the demo dataset is ingested), Playwright and Debian's chromium
(``/usr/bin/chromium``; see CONTRIBUTING.md). Every request a page makes is refused: the pages
must draw offline.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for folder in (REPO, REPO / "tests" / "docs"):
    if str(folder) not in sys.path:  # run as a script from a checkout
        sys.path.insert(0, str(folder))

import report_datasets as kinds  # noqa: E402
from docs_helpers import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

import guideloom  # noqa: E402

ASSETS = REPO / "docs" / "assets"
KINDS = ("demo", "chat", "meta", "grown", "mixture")
WIDTH, HEIGHT = 1100, 1000
# where each picture starts: the page's top, or the heading of what that kind adds
FOCUS = {"chat": "Loss mask", "meta": "Spans per annotation key"}


def pages(root: Path) -> dict[str, Path]:
    """Each kind's dataset and its report page, under ``root``."""
    out = {kind: root / f"{kind}.html" for kind in KINDS}
    guideloom.report(kinds.demo(root), out["demo"], sequence_length=256, windows=2)
    chat, _ = kinds.chat(root)
    guideloom.report(chat, out["chat"], sequence_length=64, tokenizer="bytes", windows=2)
    meta, _ = kinds.meta(root)
    guideloom.report(meta, out["meta"], sequence_length=48, tokenizer="bytes", windows=2)
    grown = kinds.grown(root)
    guideloom.report(grown, out["grown"], sequence_length=32, tokenizer="bytes", windows=2)
    other = kinds.other(root)
    guideloom.report([(grown, 0.7), (other, 0.3)], out["mixture"], sequence_length=32, windows=1)
    return out


def shoot(browser: Any, page_path: Path, kind: str, target: Path) -> None:
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    try:
        page = context.new_page()
        url = page_path.resolve().as_uri()
        errors: list[str] = []
        page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(url)
        page.wait_for_selector("#gl-report[data-ready=true]")
        top = 0.0
        if kind in FOCUS:
            box = page.locator("h3", has_text=FOCUS[kind]).first.bounding_box()
            top = max(0.0, (box or {"y": 0.0})["y"] - 16)
        height = page.evaluate("document.documentElement.scrollHeight")
        clip = {"x": 0, "y": top, "width": WIDTH, "height": min(HEIGHT, height - top)}
        page.screenshot(path=str(target), clip=clip, full_page=True)
        if errors:
            raise RuntimeError(f"{page_path}: {errors}")
    finally:
        context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", help="a folder to keep the datasets and pages in")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        made = pages(root)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                for kind, path in made.items():
                    target = ASSETS / f"report-{kind}.png"
                    shoot(browser, path, kind, target)
                    print(f"wrote {target.relative_to(REPO)} ({target.stat().st_size:,} bytes)")
            finally:
                browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
