"""One spelling of each layout: `guideloom.types.LAYOUTS`, with the command line's spellings as
aliases; no plug-in group for layouts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guideloom.registry import GROUPS
from guideloom.types import DOCUMENTS, LAYOUTS, STREAM, STREAM_WITH_META, layout_named
from guideloom.workers.config import IngestConfig

REPO = Path(__file__).resolve().parents[1]


def test_aliases_become_the_one_spelling_and_the_job_identity_keeps_its_digest() -> None:
    assert LAYOUTS == (DOCUMENTS, STREAM, STREAM_WITH_META) == ("documents", "stream", "stream_with_meta")
    for given, meant in [
        ("document", DOCUMENTS),
        ("documents", DOCUMENTS),
        ("stream-with-meta", STREAM_WITH_META),
    ]:
        assert layout_named(given) == meant
        extra = {"meta_fields": ["src"]} if meant == STREAM_WITH_META else {}
        config = IngestConfig(inputs=["x.jsonl"], output="o", layout=given, **extra)
        assert config.layout == meant
        # recorded as ingestion always spelled it: jobs written before resume and land once
        assert (
            config.identity()["layout"]
            == {DOCUMENTS: "document", STREAM_WITH_META: "stream-with-meta"}[meant]
        )
    with pytest.raises(
        ValueError, match="unknown layout 'doc': use one of documents, stream, stream_with_meta"
    ):
        layout_named("doc")
    with pytest.raises(ValueError, match="unknown layout 'doc'"):
        IngestConfig(inputs=["x.jsonl"], output="o", layout="doc")


def test_no_layouts_plugin_group() -> None:
    assert set(GROUPS) == {"tokenizers", "input_readers", "formats"}


def test_no_layout_compared_with_a_string_literal() -> None:
    """Layouts are compared with the constants of guideloom.types, never spelled in a comparison."""
    spelled = r'"(documents?|stream|stream[-_]with[-_]meta)"'
    comparison = re.compile(
        rf"layout\w*\s*(==|!=)\s*{spelled}|layout\w*\s+(not\s+)?in\s*[(\[{{]\s*{spelled}|{spelled}\s*(==|!=)\s*\S*layout"
    )
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for folder in ("guideloom", "workers")
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if comparison.search(line)
    ]
    assert not found, found
