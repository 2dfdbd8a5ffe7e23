"""Datasets written by an earlier GuideLoom open and verify, and this one writes the same data
into the same bytes: manifests, part records and shard files (apart from what every write stamps
on its own, see `legacy_datasets.normalized`)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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


def test_manifests_and_part_records_are_written_as_before(legacy: Path, rewritten: Path) -> None:
    before, now = written_json(legacy), written_json(rewritten)
    assert sorted(now) == sorted(before)
    assert len(before) == len(NAMES) + 5  # five part records besides the manifests
    for path, data in before.items():
        assert now[path] == data, path


def _shard_files(root: Path) -> dict[str, bytes]:
    attempt = re.compile(r"/(w|a)-[0-9a-f]{12}/")
    return {
        attempt.sub(r"/\1-<attempt>/", str(p.relative_to(root))): p.read_bytes()
        for p in root.glob("*/shards/**/*")
        if p.is_file()
    }


def test_shard_files_are_written_as_before(legacy: Path, rewritten: Path) -> None:
    before, now = _shard_files(legacy), _shard_files(rewritten)
    assert sorted(now) == sorted(before) and len(before) > 40
    assert {path.rsplit(".", 1)[-1] for path in before} >= {"docs", "idx", "tokens", "meta", "spans", "dir"}
    for path, data in before.items():
        assert now[path] == data, path
