"""The format explorer on 'Choose a storage format', driven in headless Chromium.

The built site is served from 127.0.0.1 and every request elsewhere is blocked, so the page must
work offline. The windows it shows are compared with what StreamDataset returns for the
same tokens and window size.
"""

from __future__ import annotations

import base64
import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.browser

PAGE = "choose-a-storage-format.html"
EXPLORER = "[data-guideloom-explorer]"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def page_factory(browser: Any, site_url: str) -> Iterator[Any]:
    contexts = []

    def open_page(width: int = 1000, height: int = 900) -> Any:
        context = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(context)
        page = context.new_page()
        page.external_requests = []  # type: ignore[attr-defined]
        page.errors = []  # type: ignore[attr-defined]

        def block_network(route: Any) -> None:
            if route.request.url.startswith(site_url + "/"):
                route.continue_()
            else:
                page.external_requests.append(route.request.url)
                route.abort()

        page.route("**/*", block_network)
        page.on("pageerror", lambda err: page.errors.append(str(err)))
        page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
        page.goto(f"{site_url}/{PAGE}")
        page.wait_for_selector(f"{EXPLORER} .gl-token")
        return page

    yield open_page
    for context in contexts:
        context.close()


# -- helpers that read what the page shows ------------------------------------------------------


def set_mode(page: Any, mode: str) -> None:
    page.locator(f"{EXPLORER} input[type=radio][value={mode}]").check()
    assert page.locator(EXPLORER).get_attribute("data-mode") == mode


def set_window(page: Any, size: int) -> None:
    """Move the slider with the keyboard, as a user without a mouse would."""
    slider = page.locator(f"{EXPLORER} input[type=range]")
    slider.focus()
    slider.press("Home")
    for _ in range(size - 1):
        slider.press("ArrowRight")
    assert slider.input_value() == str(size)
    assert page.locator(f"{EXPLORER} output").inner_text() == str(size)


def shown_windows(page: Any) -> dict[str, Any]:
    return page.evaluate(
        """(sel) => {
          const root = document.querySelector(sel);
          const tokens = (li) => Array.from(li.querySelectorAll('.gl-token')).map(b => b.textContent);
          const windows = Array.from(root.querySelectorAll('li[data-window-index]')).map(li => ({
            index: Number(li.dataset.windowIndex), tokens: tokens(li),
            crosses: li.dataset.crossesBoundary === 'true',
            selected: li.classList.contains('is-selected')}));
          const dropped = root.querySelector('li[data-dropped]');
          return {windows, dropped: dropped ? tokens(dropped) : [],
                  summary: root.querySelector('.gl-summary').textContent,
                  status: root.querySelector('.gl-status').textContent};
        }""",
        EXPLORER,
    )


def shown_stream(page: Any) -> list[tuple[str, int]]:
    """(text, document) of every token, in stream order, as the stream view shows them."""
    return [
        (b.inner_text(), int(b.get_attribute("data-doc")))
        for b in page.locator(f"{EXPLORER} .gl-token").all()
    ]


# -- tests ----------------------------------------------------------------------------------------


def test_loads_offline_without_errors(page_factory: Any) -> None:
    page = page_factory()
    assert page.external_requests == []
    assert page.errors == []
    stream = shown_stream(page)
    assert [t for t, _ in stream].count("<eos>") == 2
    assert stream[-1][0] == "<eos>"


def test_document_mode_shows_whole_documents(page_factory: Any) -> None:
    page = page_factory()
    set_mode(page, "document")
    samples = page.locator(f"{EXPLORER} li[data-sample-index]")
    assert samples.count() == 2
    for i in range(2):
        words = samples.nth(i).locator(".gl-token").all_inner_texts()
        assert words and "<eos>" not in words
    assert page.locator(f"{EXPLORER} input[type=range]").is_disabled()
    samples.nth(1).locator(".gl-token").first.click()
    assert "is-selected" in (samples.nth(1).get_attribute("class") or "")
    assert "is-selected" not in (samples.nth(0).get_attribute("class") or "")
    set_mode(page, "stream")
    assert page.locator(f"{EXPLORER} li[data-window-index]").count() > 0


def test_windows_match_stream_dataset(page_factory: Any, tmp_path: Path) -> None:
    from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

    page = page_factory()
    set_mode(page, "stream")
    stream = shown_stream(page)
    vocab: dict[str, int] = {}
    ids = np.array([vocab.setdefault(text, len(vocab)) for text, _ in stream])
    docs = np.array([doc for _, doc in stream])
    words = {i: w for w, i in vocab.items()}

    storage = StreamStorage(
        str(tmp_path / "explorer"), StreamNumpyFormat({"tokens": np.uint32, "doc": np.uint8})
    )
    with storage.writer() as writer:
        for d in np.unique(docs):  # one record per document, as the page describes
            writer.append({"tokens": ids[docs == d], "doc": docs[docs == d]})

    for size in range(1, len(stream) + 1):
        set_window(page, size)
        shown = shown_windows(page)
        ds = StreamDataset(storage, sequence_length=size)
        expected = [ds[i] for i in range(len(ds))]
        assert [w["tokens"] for w in shown["windows"]] == [
            [words[int(t)] for t in w["tokens"]] for w in expected
        ], f"sequence_length={size}"
        assert [w["crosses"] for w in shown["windows"]] == [
            len(set(w["doc"].tolist())) > 1 for w in expected
        ], f"sequence_length={size}"
        assert shown["dropped"] == [t for t, _ in stream[len(ds) * size :]], f"sequence_length={size}"
        assert f"{len(ds)} window" in shown["summary"]


def test_selecting_a_token_highlights_its_window(page_factory: Any) -> None:
    page = page_factory()
    set_mode(page, "stream")
    set_window(page, 4)
    tokens = page.locator(f"{EXPLORER} .gl-token")
    n = tokens.count()
    for index in range(n):
        page.locator(f'{EXPLORER} .gl-token[data-token-index="{index}"]').click()
        shown = shown_windows(page)
        selected = [w["index"] for w in shown["windows"] if w["selected"]]
        if index < (n // 4) * 4:
            assert selected == [index // 4], f"token {index}"
            assert f"window {index // 4}" in shown["status"]
        else:
            assert selected == [] and "dropped" in shown["status"], f"token {index}"
            dropped = page.locator(f"{EXPLORER} li[data-dropped]")
            assert "is-selected" in (dropped.get_attribute("class") or "")
        pressed = page.locator(f'{EXPLORER} .gl-token[aria-pressed="true"]').all()
        assert [p.get_attribute("data-token-index") for p in pressed] == [str(index)]

    # The selection follows the window size: token 5 is in window 2 of size 2, window 1 of size 3.
    page.locator(f'{EXPLORER} .gl-token[data-token-index="5"]').click()
    set_window(page, 2)
    assert [w["index"] for w in shown_windows(page)["windows"] if w["selected"]] == [2]
    set_window(page, 3)
    assert [w["index"] for w in shown_windows(page)["windows"] if w["selected"]] == [1]


def test_keyboard_only(page_factory: Any) -> None:
    page = page_factory()
    # Tab reaches the controls and the tokens; Space/Enter select; arrows move the selection.
    page.locator(f"{EXPLORER} input[type=radio][value=stream]").focus()
    for _ in range(5):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.classList.contains('gl-token')"):
            break
    assert page.evaluate("document.activeElement.dataset.tokenIndex") == "0"
    page.keyboard.press("Enter")
    assert page.locator(f'{EXPLORER} .gl-token[data-token-index="0"]').get_attribute("aria-pressed") == "true"
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.tokenIndex") == "2"
    assert page.locator(f'{EXPLORER} .gl-token[aria-pressed="true"]').get_attribute("data-token-index") == "2"
    # Arrow keys on the radio group switch modes.
    page.locator(f"{EXPLORER} input[type=radio][value=document]").focus()
    page.keyboard.press("ArrowRight")
    assert page.locator(EXPLORER).get_attribute("data-mode") == "stream"
    # Controls have accessible names, and the status is announced.
    assert page.get_by_label("Window size (sequence_length)").count() == 1
    assert page.locator(f"{EXPLORER} [role=status][aria-live=polite]").count() == 1


def test_fits_a_phone_screen(page_factory: Any) -> None:
    page = page_factory(width=360, height=740)
    for mode in ("stream", "document"):
        set_mode(page, mode)
        box = page.evaluate(
            """(sel) => { const r = document.querySelector(sel);
                 const b = r.getBoundingClientRect();
                 const right = Math.max(...Array.from(r.querySelectorAll('*'))
                                        .map(e => e.getBoundingClientRect().right));
                 return {left: b.left, right: b.right, scroll: r.scrollWidth, client: r.clientWidth,
                         inner: right}; }""",
            EXPLORER,
        )
        assert box["left"] >= 0 and box["right"] <= 360, box
        assert box["scroll"] <= box["client"], box
        assert box["inner"] <= 360, box


def _pixel_stats(page: Any, png: bytes) -> dict[str, Any]:
    """Decode a PNG in the browser's canvas and count colours."""
    return page.evaluate(
        """async (data) => {
          const img = new Image();
          img.src = 'data:image/png;base64,' + data;
          await img.decode();
          const c = document.createElement('canvas');
          c.width = img.width; c.height = img.height;
          const ctx = c.getContext('2d');
          ctx.drawImage(img, 0, 0);
          const px = ctx.getImageData(0, 0, c.width, c.height).data;
          const colours = new Set();
          let nonWhite = 0, highlight = 0, docA = 0, docB = 0;
          const near = (r, g, b, R, G, B) => Math.abs(r - R) + Math.abs(g - G) + Math.abs(b - B) < 24;
          for (let i = 0; i < px.length; i += 4) {
            const [r, g, b] = [px[i], px[i + 1], px[i + 2]];
            colours.add((r << 16) | (g << 8) | b);
            if (r < 245 || g < 245 || b < 245) nonWhite++;
            if (near(r, g, b, 0xff, 0xd3, 0x3d)) highlight++;
            if (near(r, g, b, 0x1f, 0x6f, 0xeb)) docA++;
            if (near(r, g, b, 0x1a, 0x7f, 0x37)) docB++;
          }
          return {width: c.width, height: c.height, colours: colours.size,
                  nonWhite: nonWhite / (px.length / 4), highlight, docA, docB};
        }""",
        base64.b64encode(png).decode("ascii"),
    )


def test_screenshot_is_not_blank(page_factory: Any, tmp_path: Path) -> None:
    page = page_factory()
    set_mode(page, "stream")
    set_window(page, 4)
    page.locator(f'{EXPLORER} .gl-token[data-token-index="5"]').click()
    explorer = page.locator(EXPLORER)
    png = explorer.screenshot(path=str(tmp_path / "explorer.png"))
    stats = _pixel_stats(page, png)
    assert stats["width"] > 300 and stats["height"] > 200, stats
    assert stats["colours"] > 50, stats  # text, borders, fills: not a flat render
    assert 0.05 < stats["nonWhite"] < 0.95, stats  # neither blank nor one solid block
    assert stats["highlight"] > 50, stats  # the selected token is highlighted
    assert stats["docA"] > 50 and stats["docB"] > 50, stats  # both documents are coloured
    # The styles took effect (a broken stylesheet link would leave default buttons).
    colour = page.locator(f'{EXPLORER} .gl-token[aria-pressed="true"]').evaluate(
        "b => getComputedStyle(b).backgroundColor"
    )
    assert colour == "rgb(255, 211, 61)"


# -- the whole site at a desktop and a phone width -------------------------------------------------

SCREENSHOT_PAGES = {"home": "index.html", "explorer": PAGE, "reference": "reference/api.html"}
MOST_USED = ["writer", "commit", "part_complete", "verify", "delete", "refresh", "read_windows"]


@pytest.mark.parametrize("width", [1280, 360])
def test_site_screenshots_and_reference(browser: Any, site_url: str, width: int, tmp_path: Path) -> None:
    """Screenshots of the home page, the explorer and the API reference (kept under
    GUIDELOOM_SCREENSHOTS when set, else in the test's temporary folder), taken offline."""
    import os

    out = Path(os.environ.get("GUIDELOOM_SCREENSHOTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        external: list[str] = []
        errors: list[str] = []

        def block_network(route: Any) -> None:
            if route.request.url.startswith(site_url + "/"):
                route.continue_()
            else:
                external.append(route.request.url)
                route.abort()

        page.route("**/*", block_network)
        page.on("pageerror", lambda err: errors.append(str(err)))
        for name, path in SCREENSHOT_PAGES.items():
            page.goto(f"{site_url}/{path}")
            page.wait_for_load_state("load")
            if name == "explorer":
                page.wait_for_selector(f"{EXPLORER} .gl-token")
                page.locator(EXPLORER).scroll_into_view_if_needed()
            shot = out / f"{name}-{width}.png"
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 5_000, f"{shot} is (nearly) empty"
            # Nothing wider than the viewport: no sideways scrolling of the page itself.
            scroll = page.evaluate("document.documentElement.scrollWidth")
            assert scroll <= width + 1, f"{path} is {scroll} px wide at {width} px"
            if name == "home" and width == 1280:
                tabs = page.locator(".md-tabs__item")
                assert tabs.count() > 3
                boxes = [b for b in (t.bounding_box() for t in tabs.all()) if b]
                assert len({round(b["y"]) for b in boxes}) == 1, "the navigation tabs wrap"
                assert max(b["x"] + b["width"] for b in boxes) <= width, "a navigation tab is cut off"
                assert page.locator(".md-search__input").count() == 1  # search
                assert page.locator("[data-md-color-scheme]").count() >= 1  # dark mode toggle
            if name == "reference":
                for method in MOST_USED:
                    cls = "StreamDataset" if method == "read_windows" else "StreamStorage"
                    entry = page.locator(f'[id="guideloom.{cls}.{method}"]')
                    assert entry.count() == 1, f"{cls}.{method} is not on the reference page"
                    assert method in entry.inner_text()
        page.goto(f"{site_url}/quick-start.html")
        page.wait_for_selector(".md-code__button", state="attached", timeout=10_000)  # copy buttons
        assert external == [] and errors == []
    finally:
        context.close()


def test_chat_mode_dims_the_tokens_with_loss_mask_0(page_factory: Any) -> None:
    """The chat sample's mask is ChatML's under train_on: assistant, as ingestion writes it."""
    page = page_factory()
    set_mode(page, "chat")
    tokens = page.locator(f"{EXPLORER} .gl-token")
    texts = tokens.all_inner_texts()
    masks = [tokens.nth(i).get_attribute("data-loss-mask") for i in range(tokens.count())]
    trained = [t for t, m in zip(texts, masks) if m == "1"]
    assert trained == ["4.", "<|im_end|>", "6.", "<|im_end|>"]
    dimmed = page.locator(f"{EXPLORER} .gl-token--masked")
    assert dimmed.count() == masks.count("0") > 0
    opacity = float(dimmed.first.evaluate("e => getComputedStyle(e).opacity"))
    assert opacity < 1
    tokens.nth(texts.index("4.")).click()
    assert "has loss_mask 1" in page.locator(f"{EXPLORER} [role=status]").inner_text()
