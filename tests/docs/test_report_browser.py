"""`guideloom report`'s HTML, opened from disk in headless Chromium with every request blocked.

Five kinds of dataset (tests/docs/report_datasets.py): the demo dataset, chat data, a stream with
metadata, a dataset grown by appends with a rollback and an expired snapshot, and a mixture. Each
page must load with no console error and no request, and the numbers it shows (read from its DOM)
must equal what the manifests, the snapshot log and the data themselves say. The reports are built
once per module; the tests share one Chromium (the `browser` fixture: xdist group ``site``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report_datasets as kinds  # noqa: E402

# One xdist group for the whole module (the `browser` fixture's): the reports are built once,
# also for the tests that read them without a browser.
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("site")]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every dataset and its report: the demo's through the command line, the rest through
    `guideloom.report`."""
    from typer.testing import CliRunner

    import guideloom
    from guideloom.cli import app

    root = tmp_path_factory.mktemp("report")
    out: dict[str, Any] = {}
    demo = kinds.demo(root)
    page = root / "demo.html"
    result = CliRunner().invoke(app, ["report", demo, "--html", str(page), "-L", "256"])
    assert result.exit_code == 0, result.output
    assert f"wrote {page}" in result.output
    out["demo"] = {"url": demo, "html": page}
    chat, written = kinds.chat(root)
    out["chat"] = {"url": chat, "written": written, "html": root / "chat.html"}
    guideloom.report(chat, root / "chat.html", sequence_length=64, tokenizer="bytes", windows=2)
    meta, keys = kinds.meta(root)
    out["meta"] = {"url": meta, "keys": keys, "html": root / "meta.html"}
    guideloom.report(meta, root / "meta.html", sequence_length=48, tokenizer="bytes")
    grown = kinds.grown(root)
    out["grown"] = {"url": grown, "html": root / "grown.html"}
    guideloom.report(grown, root / "grown.html", sequence_length=32, tokenizer="bytes")
    other = kinds.other(root)
    out["mixture"] = {"urls": (grown, other), "html": root / "mixture.html"}
    guideloom.report([(grown, 0.7), (other, 0.3)], root / "mixture.html", sequence_length=32)
    return out


def _open(browser: Any, path: Path) -> Any:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.external = []  # type: ignore[attr-defined]
    url = path.resolve().as_uri()

    def block(route: Any) -> None:
        if route.request.url == url:
            route.continue_()
        else:
            page.external.append(route.request.url)
            route.abort()

    page.route("**/*", block)
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.on("console", lambda msg: page.errors.append(msg.text) if msg.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("#gl-report[data-ready=true]")
    return page


@pytest.fixture
def opened(browser: Any) -> Any:
    pages: list[Any] = []

    def open_page(path: Path) -> Any:
        page = _open(browser, path)
        pages.append(page)
        return page

    yield open_page
    for page in pages:
        assert page.errors == [], page.errors
        assert page.external == [], page.external
        page.context.close()


def _cards(page: Any, index: int = 0) -> dict[str, str]:
    return page.evaluate(
        """(i) => Object.fromEntries(Array.from(document.querySelectorAll(
             `section[data-dataset-index="${i}"] dd[data-total]`)).map(d => [d.dataset.total, d.dataset.value]))""",
        index,
    )


def _bars(page: Any, figure: str, index: int = 0) -> list[int]:
    return page.evaluate(
        """([f, i]) => Array.from(document.querySelectorAll(
             `section[data-dataset-index="${i}"] [data-figure="${f}"] rect[data-count]`)).map(r => Number(r.dataset.count))""",
        [figure, index],
    )


def _figure(page: Any, figure: str, index: int = 0) -> dict[str, str]:
    return page.evaluate(
        """([f, i]) => Object.assign({}, document.querySelector(
             `section[data-dataset-index="${i}"] [data-figure="${f}"]`).dataset)""",
        [figure, index],
    )


def _check_against_manifest(page: Any, url: str, index: int = 0) -> Any:
    """The cards, shard sizes and record lengths equal the manifest's and the index files'."""
    import guideloom

    storage = guideloom.open(url)
    m = storage.manifest
    cards = _cards(page, index)
    for key, value in (("records", m.total_records), ("tokens", m.total_tokens), ("bytes", m.total_bytes),
                       ("shards", len(m.shards)), ("parts", m.num_parts)):  # fmt: skip
        assert int(cards[key]) == value, key
    sizes = [sum(f.size for f in s.files.values()) for s in m.shards]
    assert sum(_bars(page, "shard-sizes", index)) == len(sizes)
    shard_fig = _figure(page, "shard-sizes", index)
    assert (int(shard_fig["min"]), int(shard_fig["max"])) == (min(sizes), max(sizes))
    lengths = _bars(page, "record-lengths", index)
    assert sum(lengths) == m.total_records  # every shard read (small datasets)
    return storage


def _window_tokens(page: Any, index: int = 0) -> list[dict[str, Any]]:
    return page.evaluate(
        """(i) => Array.from(document.querySelectorAll(`section[data-dataset-index="${i}"] .gl-window`)).map(w => ({
             index: Number(w.dataset.windowIndex),
             ids: Array.from(w.querySelectorAll('.gl-tok')).map(t => Number(t.dataset.id)),
             text: Array.from(w.querySelectorAll('.gl-tok')).map(t => t.textContent),
             masked: Array.from(w.querySelectorAll('.gl-tok')).map(t => t.classList.contains('gl-tok--masked')),
             starts: Array.from(w.querySelectorAll('.gl-tok')).map((t, k) => t.classList.contains('gl-tok--start') ? k : -1).filter(k => k >= 0),
             spans: Array.from(w.querySelectorAll('.gl-tok')).map(t => t.classList.contains('gl-tok--span')),
           }))""",
        index,
    )


def test_demo_dataset(opened: Any, built: dict[str, Any]) -> None:
    import guideloom
    from guideloom import StreamDataset
    from guideloom.workers.tokenizer import load_tokenizer

    tok = load_tokenizer("bytes")
    page = opened(built["demo"]["html"])
    storage = _check_against_manifest(page, built["demo"]["url"])
    assert _cards(page)["tokenizer"] == "bytes"
    ds = StreamDataset(storage, sequence_length=256)
    windows = _window_tokens(page)
    assert len(windows) == 3
    for w in windows:
        ids = ds[w["index"]]["tokens"].tolist()
        assert w["ids"] == ids
        assert "".join(w["text"]) == tok.decode(ids)  # decoded with the tokenizer the manifest names
        assert w["starts"] == ds.record_starts(w["index"]).tolist()
    predicted = guideloom.estimate(storage, sequence_length=256, batch_size=8, shuffle="block")
    figure = _figure(page, "requests")
    row = page.evaluate(
        "Object.assign({}, document.querySelector('[data-figure=requests] tr[data-requests]').dataset)"
    )
    assert figure and int(row["requests"]) == predicted.requests and int(row["bytes"]) == predicted.bytes
    timeline = _figure(page, "timeline")
    assert timeline["snapshots"] == "1" and timeline["expired"] == "0"


def test_chat_dataset(opened: Any, built: dict[str, Any]) -> None:
    from guideloom import StreamDataset

    page = opened(built["chat"]["html"])
    storage = _check_against_manifest(page, built["chat"]["url"])
    written = built["chat"]["written"]
    mask = _figure(page, "loss-mask")
    assert int(mask["ones"]) == written["ones"] and int(mask["tokens"]) == written["tokens"]
    assert float(mask["share"]) == pytest.approx(written["ones"] / written["tokens"])
    per_record = _bars(page, "loss-mask-per-record")
    expected, _ = np.histogram(written["shares"], bins=10, range=(0.0, 1.0))
    assert per_record == expected.tolist()
    from guideloom.workers.tokenizer import load_tokenizer

    tok = load_tokenizer("bytes")
    ds = StreamDataset(storage, sequence_length=64)
    for w in _window_tokens(page):
        sample = ds[w["index"]]
        assert w["masked"] == (sample["loss_mask"] == 0).tolist()
        assert "".join(w["text"]) == tok.decode(w["ids"])  # multi-byte characters whole
    dimmed = page.locator(".gl-tok--masked").first
    assert float(dimmed.evaluate("e => getComputedStyle(e).opacity")) < 1


def test_dataset_with_metadata(opened: Any, built: dict[str, Any]) -> None:
    import guideloom
    from guideloom import StreamWithMetaDataset

    page = opened(built["meta"]["html"])
    storage = _check_against_manifest(page, built["meta"]["url"])
    keys = page.evaluate(
        "Object.fromEntries(Array.from(document.querySelectorAll('[data-figure=span-keys] tr[data-key]'))"
        ".map(r => [r.dataset.key, Number(r.dataset.count)]))"
    )
    assert keys == built["meta"]["keys"]
    assert int(_cards(page)["spans"]) == storage.manifest.total_spans
    ds = StreamWithMetaDataset(storage, sequence_length=48)
    for w in _window_tokens(page):
        spans = ds[w["index"]]["spans"]
        inside = [any(a <= t < b for a, b, _ in spans) for t in range(len(w["ids"]))]
        assert w["spans"] == inside
    # the requests of an epoch: token windows plus the span directory, span rows and annotations
    predicted = guideloom.estimate(storage, sequence_length=48, batch_size=8, shuffle="block")
    row = page.evaluate(
        "Object.assign({}, document.querySelector('[data-figure=requests] tr[data-requests]').dataset)"
    )
    assert int(row["requests"]) == predicted.requests > 0 and int(row["bytes"]) == predicted.bytes
    assert int(row["samples"]) == predicted.windows


def test_grown_dataset_with_a_rollback(opened: Any, built: dict[str, Any]) -> None:
    import guideloom

    page = opened(built["grown"]["html"])
    storage = _check_against_manifest(page, built["grown"]["url"])
    snaps = storage.snapshots()
    assert [s.operation for s in snaps] == ["append", "append", "rollback"]
    shown = page.evaluate(
        "Array.from(document.querySelectorAll('[data-figure=timeline] g[data-snapshot]'))"
        ".map(g => [g.dataset.snapshot, g.dataset.operation, Number(g.dataset.tokens), g.dataset.current])"
    )
    assert shown == [[s.id, s.operation, s.summary.tokens, str(s.id == snaps[-1].id).lower()] for s in snaps]
    timeline = _figure(page, "timeline")
    assert timeline["expired"] == "1"  # the first write expired
    arrow = page.locator("[data-figure=timeline] path[data-rollback-to]")
    assert arrow.get_attribute("data-rollback-to") == snaps[-1].source
    # an older snapshot, opened by id: its own totals, and the timeline marks it
    old = guideloom.report(storage.url, snapshot=snaps[1].id, sequence_length=32)["datasets"][0]
    assert old["snapshot"] == snaps[1].id and old["totals"]["tokens"] == snaps[1].summary.tokens


def test_mixture(opened: Any, built: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from guideloom.cli import app

    grown, other = built["mixture"]["urls"]
    page = opened(built["mixture"]["html"])
    rows = page.evaluate(
        "Array.from(document.querySelectorAll('[data-figure=mixture] tr[data-source]')).map(r => Object.assign({}, r.dataset))"
    )
    mix = CliRunner().invoke(app, ["mix", f"{grown}=0.7", f"{other}=0.3", "-L", "32", "--preview", "0"])
    assert mix.exit_code == 0, mix.output
    epoch = int(mix.output.split("mixture epoch", 1)[1].split()[0].replace(",", ""))
    assert int(page.locator("[data-figure=mixture]").get_attribute("data-epoch-length")) == epoch
    printed = [line.split() for line in mix.output.splitlines() if line.strip().startswith(("A ", "B "))]
    assert len(rows) == len(printed) == 2
    for row, line in zip(rows, printed):
        _, name, share, samples, per_epoch, repeats = line[:6]
        assert row["source"].endswith(name.rsplit("/", 1)[-1])
        assert f"{float(row['share']):.4%}" == share
        assert int(row["samples"]) == int(samples.replace(",", ""))
        assert int(row["perEpoch"]) == int(per_epoch.replace(",", ""))
        assert f"{float(row['repeats']):.3f}x" == repeats
    for index in (0, 1):  # each source's own section follows
        _check_against_manifest(page, (grown, other)[index], index)


def test_page_is_self_contained(built: dict[str, Any]) -> None:
    text = built["chat"]["html"].read_text(encoding="utf-8")
    assert "<script src" not in text and "<link" not in text and "url(" not in text
    data = json.loads(text.split('id="gl-report-data">', 1)[1].split("</script>", 1)[0])
    assert data["kind"] == "dataset" and data["datasets"][0]["loss_mask"]["exact"] is True


def test_docs_page_shows_a_screenshot_of_each_kind() -> None:
    """docs/report.md shows the PNGs scripts/docs/report_screenshots.py captures, one a kind."""
    repo = Path(__file__).resolve().parents[2]
    page = (repo / "docs" / "report.md").read_text(encoding="utf-8")
    script = (repo / "scripts" / "docs" / "report_screenshots.py").read_text(encoding="utf-8")
    for kind in ("demo", "chat", "meta", "grown", "mixture"):
        png = repo / "docs" / "assets" / f"report-{kind}.png"
        assert f"assets/report-{kind}.png" in page and f'"{kind}"' in script
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, png


def test_token_pieces_keep_multibyte_characters_whole() -> None:
    from guideloom.reporting import _pieces
    from guideloom.workers.tokenizer import load_tokenizer

    tok = load_tokenizer("bytes")
    ids = [*"déjà vu".encode(), 256]
    pieces = _pieces(tok, ids)
    assert len(pieces) == len(ids) and "".join(pieces) == "déjà vu<eos>"
    assert pieces[1:3] == ["", "é"] and pieces[-1] == "<eos>"
    cut = ids[:2]  # a window ending inside a character shows what decoding it shows
    assert "".join(_pieces(tok, cut)) == tok.decode(cut)
