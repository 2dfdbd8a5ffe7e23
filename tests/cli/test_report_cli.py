"""`guideloom report` on the command line: its JSON equals `guideloom.report`'s data, and bad
input gets an error that names the problem and the fix (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import guideloom
from guideloom import DocumentJsonFormat, DocumentStorage, StreamNumpyFormat, StreamStorage
from guideloom.cli import app


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("report-cli")
    stream = StreamStorage(str(root / "stream"), StreamNumpyFormat({"tokens": np.uint32}))
    with stream.writer(shard_size=200) as writer:
        for k in range(20):
            writer.append({"tokens": np.arange(k, k + 17, dtype=np.uint32)})
    docs = DocumentStorage(str(root / "docs"), DocumentJsonFormat())
    with docs.writer(shard_size=200) as writer:
        for k in range(30):
            writer.append({"text": "x" * (k + 1)})
    return {"stream": stream.url, "docs": docs.url, "root": root}


def test_json_is_the_python_report(sources: dict[str, Any]) -> None:
    result = CliRunner().invoke(app, ["report", sources["stream"], "--json", "-L", "16"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)["datasets"][0]
    direct = guideloom.report(sources["stream"], sequence_length=16)["datasets"][0]
    assert shown["totals"] == direct["totals"] and shown["windows"] == direct["windows"]
    assert shown["requests"] == direct["requests"]
    assert shown["record_lengths"]["counts"] == direct["record_lengths"]["counts"]
    assert sum(shown["record_lengths"]["counts"]) == 20 and shown["record_lengths"]["min"] == 17


def test_documents_report_byte_lengths(sources: dict[str, Any]) -> None:
    page = sources["root"] / "docs.html"
    result = CliRunner().invoke(app, ["report", sources["docs"], "--html", str(page)])
    assert result.exit_code == 0, result.output
    data = json.loads(page.read_text().split('id="gl-report-data">', 1)[1].split("</script>", 1)[0])
    lengths = data["datasets"][0]["record_lengths"]
    encoded = [len(json.dumps({"text": "x" * (k + 1)}, separators=(",", ":")).encode()) for k in range(30)]
    assert lengths["unit"] == "bytes" and lengths["n"] == 30
    # the page says why: a document index holds byte offsets, no token counts
    assert any("encoded bytes, not tokens" in n for n in data["datasets"][0]["notes"])
    assert (lengths["min"], lengths["max"]) == (min(encoded), max(encoded))
    assert all("document" in w for w in data["datasets"][0]["windows"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{stream}"], "--html FILE"),
        (["{stream}=x", "{stream}=1", "--json"], "weight 'x' is not a positive, finite number"),
        (["{stream}=0", "{stream}=1", "--json"], "not a positive, finite number"),
        (["{stream}=1", "{docs}=1", "--json", "-L", "8"], "mix storage classes"),
        (["{stream}=1", "{stream}=1", "--json", "--snapshot", "1"], "--snapshot applies to one dataset"),
        (["{stream}", "--json", "--shuffle", "sideways"], "one of off, block, full"),
        (["{root}/nothing-here", "--json"], "nothing-here"),
    ],
)
def test_bad_input_is_named(sources: dict[str, Any], args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["report", *(a.format(**sources) for a in args)])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_page_escapes_what_it_shows(tmp_path: Path) -> None:
    """Text from the data (document contents, URLs) cannot close the inline script."""
    docs = DocumentStorage(str(tmp_path / "docs"), DocumentJsonFormat())
    with docs.writer() as writer:
        writer.append({"text": "</script><script>alert(1)</script>"})
    page = tmp_path / "page.html"
    guideloom.report(docs.url, page)
    text = page.read_text()
    assert text.count("</script>") == 2 and "alert(1)" in text  # the two of the page; the data's escaped
