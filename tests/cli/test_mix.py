"""`guideloom mix` prints the plan of the Mixture of the same sources: the mixture's own arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from guideloom import DocumentJsonFormat, DocumentStorage, Mixture, StreamNumpyFormat, StreamStorage
from guideloom.cli import app
from guideloom.errors import MixtureError


def _documents(url: str, lengths: list[int], tokens: int | None) -> Any:
    storage = DocumentStorage(url, DocumentJsonFormat())
    with storage.writer(metadata={"tokens": tokens} if tokens is not None else None) as writer:
        for n in lengths:
            writer.append({"tokens": list(range(n))})
    return DocumentStorage(url, DocumentJsonFormat())


def _stream(url: str, tokens: int) -> Any:
    storage = StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}))
    with storage.writer() as writer:
        writer.append({"tokens": np.arange(tokens, dtype=np.uint16)})
    return StreamStorage(url, StreamNumpyFormat({"tokens": np.uint16}))


def _mix(*args: str) -> str:
    result = CliRunner().invoke(app, ["mix", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("weight_by", ["samples", "tokens"])
def test_mix_prints_the_mixture_s_plan_for_documents(tmp_path: Any, weight_by: str) -> None:
    short = _documents(str(tmp_path / "short"), [3, 4, 5] * 7, 84)
    long = _documents(str(tmp_path / "long"), [40, 60] * 3, 300)
    weights = [(short, 0.7), (long, 0.3)]
    plan = Mixture(weights, weight_by=weight_by).plan()  # type: ignore[arg-type]
    printed = _mix(f"{short.url}=0.7", f"{long.url}=0.3", "--weight-by", weight_by, "--preview", "40")
    assert printed.rstrip("\n").splitlines() == plan.lines(40)
    if weight_by == "tokens":  # shares of tokens as asked: documents by the inverse mean length
        assert plan.token_shares == pytest.approx([0.7, 0.3], rel=1e-9)
        assert "token share" in printed


def test_mix_prints_the_mixture_s_plan_for_streams(tmp_path: Any) -> None:
    a, b = _stream(str(tmp_path / "a"), 800), _stream(str(tmp_path / "b"), 130)
    for weight_by in ("samples", "tokens"):  # windows all hold sequence_length tokens: the same
        plan = Mixture([(a, 1), (b, 2)], weight_by=weight_by, stopping_strategy="first_exhausted").plan(16)  # type: ignore[arg-type]
        printed = _mix(
            f"{a.url}=1", f"{b.url}=2", "-L", "16", "--weight-by", weight_by,
            "--stopping-strategy", "first_exhausted",
        )  # fmt: skip
        assert printed.rstrip("\n").splitlines() == plan.lines()


def test_mix_refuses_documents_without_token_counts(tmp_path: Any) -> None:
    known = _documents(str(tmp_path / "known"), [3, 4], 7)
    unknown = _documents(str(tmp_path / "unknown"), [3, 4], None)
    result = CliRunner().invoke(app, ["mix", f"{known.url}=1", f"{unknown.url}=1", "--weight-by", "tokens"])
    assert result.exit_code == 2
    assert f"{unknown.url}: --weight-by tokens needs its number of tokens" in result.output


def test_mix_refuses_what_mixture_refuses_fields_that_differ(tmp_path: Any) -> None:
    """A tokens-only source with a tokens + doc_index source: the Mixture refuses it, and so does
    the preview (exit 2, both sources and both schemas named), never a table."""
    a = _stream(str(tmp_path / "a"), 800)
    fmt = StreamNumpyFormat({"tokens": np.uint16, "doc_index": np.uint32})
    b = StreamStorage(str(tmp_path / "b"), fmt)
    with b.writer() as writer:
        writer.append({"tokens": np.arange(300, dtype=np.uint16), "doc_index": np.zeros(300, np.uint32)})
    with pytest.raises(MixtureError) as caught:
        Mixture([(a, 1), (StreamStorage(b.url, fmt), 1)])
    result = CliRunner().invoke(app, ["mix", f"{a.url}=1", f"{b.url}=1", "-L", "16"])
    assert result.exit_code == 2, result.output
    assert "need the same fields and dtypes" in result.output and "doc_index" in result.output
    assert str(caught.value).split(" has the schema ")[1] in result.output.replace("\n", "")
    assert "shares" not in result.output and "epoch" not in result.output  # no table


def test_mix_of_two_storage_classes_names_each_and_the_fix(tmp_path: Any) -> None:
    docs = _documents(str(tmp_path / "docs"), [3, 4], 7)
    stream = _stream(str(tmp_path / "s"), 100)
    result = CliRunner().invoke(app, ["mix", f"{docs.url}=1", f"{stream.url}=1", "-L", "16"])
    assert result.exit_code == 2, result.output
    text = result.output.replace("\n", "")
    assert "is a DocumentStorage" in text and "is a StreamStorage" in text
    assert "preview (and mix) only sources of one class" in text
    # the fix as written: only the DocumentStorage sources
    assert "only the DocumentStorage sources" in text
    assert _mix(f"{docs.url}=1").strip()  # one class previews (exit 0, a table)
