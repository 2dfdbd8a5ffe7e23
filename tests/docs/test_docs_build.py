"""The documentation builds offline with `mkdocs build --strict` (warnings, including broken
internal links and anchors, are errors) and the built site needs nothing from the network."""

from __future__ import annotations

import re
from pathlib import Path

from docs_helpers import DOCS, EXAMPLES, build_site


def test_strict_build_catches_a_broken_link(tmp_path: Path) -> None:
    # Strict mode must fail on a broken internal link; check with a throwaway page.
    page = DOCS / "_broken_link_probe.md"
    page.write_text("# Probe\n\n[nowhere](does-not-exist.md)\n", encoding="utf-8")
    try:
        result = build_site(tmp_path / "site")
    finally:
        page.unlink()
    assert result.returncode != 0
    assert "does-not-exist.md" in result.stdout + result.stderr


def test_site_builds_with_every_page(built_site: Path) -> None:
    for md in DOCS.rglob("*.md"):
        html = built_site / md.relative_to(DOCS).with_suffix(".html")
        assert html.exists(), f"{md.relative_to(DOCS)} was not built"


def test_no_resource_is_loaded_from_the_network(built_site: Path) -> None:
    # Links to other sites are fine; scripts, styles, images and fonts must ship with the site.
    loaded = re.compile(
        r"<(?:script|img|iframe|source)\b[^>]*\bsrc=\"(https?:)?//|"
        r"<link\b[^>]*\bhref=\"(https?:)?//",
        re.I,
    )
    for html in built_site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        match = loaded.search(text)
        assert match is None, (
            f"{html.relative_to(built_site)} loads {text[match.start() : match.start() + 120]}"
        )
    for css in built_site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text(encoding="utf-8")), css


def test_api_reference_is_generated_from_docstrings(built_site: Path) -> None:
    html = (built_site / "reference" / "api.html").read_text(encoding="utf-8")
    for name in [
        "StreamStorage",
        "StreamNumpyFormat",
        "StreamDataset",
        "DocumentStorageFormat",
        "StreamWithMetaStorageFormat",
        "StatefulDataLoader",
    ]:
        assert f'id="guideloom.{name}"' in html, f"{name} is missing from the API reference"
    assert "Subclasses implement" in html  # a sentence from DocumentStorageFormat's docstring


def test_every_example_is_shown_in_the_docs() -> None:
    included = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "examples").glob("*.md"))
    for script in EXAMPLES.glob("*.py"):
        assert f'--8<-- "examples/{script.name}"' in included, f"{script.name} has no docs page"


def test_explorer_is_on_the_format_page(built_site: Path) -> None:
    html = (built_site / "choose-a-storage-format.html").read_text(encoding="utf-8")
    assert "data-guideloom-explorer" in html
    assert "explorer/explorer.js" in html and "explorer/explorer.css" in html
    assert (built_site / "explorer" / "explorer.js").exists()
