"""Datasets written by an earlier GuideLoom open and verify, and this one writes the same data
into the same bytes: manifests, part records and shard files (apart from what every write stamps
on its own, see `legacy_datasets.normalized`)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from legacy_datasets import (
    NAMES,
    documents,
    meta_records,
    open_storage,
    stream_records,
    write_datasets,
    written_json,
)

from guideloom import DocumentDataset, StreamDataset, StreamWithMetaDataset

LEGACY = Path(__file__).resolve().parent / "data" / "v0.1.0"


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("legacy")
    shutil.copytree(LEGACY, root, dirs_exist_ok=True)
    return root


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rewritten")
    write_datasets(root)
    return root


def _joined_tokens(records: list[dict[str, np.ndarray]]) -> np.ndarray:
    return np.concatenate([r["tokens"] for r in records])


@pytest.mark.parametrize("name", NAMES)
def test_datasets_written_before_open_read_and_verify(legacy: Path, name: str) -> None:
    storage = open_storage(legacy, name)
    assert [err for _, err in storage.verify() if err is not None] == []
    if name == "documents":
        assert list(DocumentDataset(storage)) == documents()
    elif name == "parts_default_run":
        docs = documents()
        assert list(DocumentDataset(storage)) == docs[0::2] + docs[1::2]
        assert storage.read_part_record(1).metadata == {"part": 1}
    elif name == "stream":
        view = StreamDataset(storage, sequence_length=4)
        assert np.concatenate([view[i]["tokens"] for i in range(len(view))]).tolist() == (
            _joined_tokens(stream_records())[: 4 * len(view)].tolist()
        )
    elif name == "parts_named_run":
        records = stream_records()
        expected = _joined_tokens([r for k in range(3) for r in records[k::3]])
        view = StreamDataset(storage, sequence_length=1)
        assert view.read_windows(list(range(len(view))))["tokens"][:, 0].tolist() == expected.tolist()
        assert storage.manifest.metadata == {"job": "legacy"}
    else:
        view = StreamWithMetaDataset(storage, sequence_length=len(_joined_meta_tokens()))
        (sample,) = view.__getitems__([0])
        assert sample["tokens"].tolist() == _joined_meta_tokens().tolist()
        assert sample["spans"] == _joined_meta_spans()


def _joined_meta_tokens() -> np.ndarray:
    return np.concatenate([tokens for tokens, _ in meta_records()])


def _joined_meta_spans() -> list[tuple[int, int, list[str]]]:
    out, at = [], 0
    for tokens, spans in meta_records():
        out += [(a + at, b + at, annotation) for a, b, annotation in spans]
        at += len(tokens)
    return out


def _without_starts(data: bytes) -> tuple[Any, bool]:
    """A manifest or part record (JSON) without its record-start files and version: what this
    GuideLoom writes beyond the earlier one. Also whether it had record starts."""
    doc = json.loads(data)
    found = False

    def strip(node: Any) -> None:
        nonlocal found
        if isinstance(node, dict):
            files = node.get("files")
            if isinstance(files, dict) and "starts" in files:
                found = True
                del files["starts"]
            for value in node.values():
                strip(value)
        elif isinstance(node, list):
            for value in node:
                strip(value)

    strip(doc)
    doc.pop("version", None)
    doc.pop("total_bytes", None)  # the record-start files count too
    return doc, found


def test_manifests_and_part_records_are_written_as_before(legacy: Path, rewritten: Path) -> None:
    """The same JSON, apart from what record starts add to streams: a ``starts`` file per shard
    and version 3 (documents: byte for byte the same)."""
    before, now = written_json(legacy), written_json(rewritten)
    assert sorted(now) == sorted(before)
    assert len(before) == len(NAMES) + 5  # five part records besides the manifests
    for path, data in before.items():
        stream = not path.startswith(("documents", "parts_default_run"))
        if not stream:
            assert now[path] == data, path
            continue
        stripped, had_starts = _without_starts(now[path])
        assert had_starts and json.loads(now[path])["version"] == 3, path
        assert stripped == _without_starts(data)[0], path


def _shard_files(root: Path) -> dict[str, bytes]:
    attempt = re.compile(r"/(w|a)-[0-9a-f]{12}/")
    return {
        attempt.sub(r"/\1-<attempt>/", str(p.relative_to(root))): p.read_bytes()
        for p in root.glob("*/shards/**/*")
        if p.is_file()
    }


def test_shard_files_are_written_as_before(legacy: Path, rewritten: Path) -> None:
    """Every shard file the earlier GuideLoom wrote is written into the same bytes; the only new
    files are the record starts of stream shards, one beside each token file."""
    before, now = _shard_files(legacy), _shard_files(rewritten)
    added = sorted(set(now) - set(before))
    assert set(before) <= set(now) and len(before) > 40
    assert added == sorted(p[: -len("tokens")] + "starts" for p in before if p.endswith(".tokens"))
    assert {path.rsplit(".", 1)[-1] for path in before} >= {"docs", "idx", "tokens", "meta", "spans", "dir"}
    for path, data in before.items():
        assert now[path] == data, path
