"""Fixtures for the ingestion tests: input files written with plain Python, a tiny real BPE
tokenizer trained offline, and a config factory. Ray comes from the session's `ray_local`.

Fixtures:
    hf_tokenizer_json   session   path of a byte-level BPE tokenizer.json (tokenizers, trained here)
    write_jsonl         function  write_jsonl(name, rows_or_lines, compression=None) -> Path
    doc_rows            function  doc_rows(n, start=0) -> [{"id", "text"}, ...]
    ingest_config       function  ingest_config(inputs, output, **options) -> IngestConfig
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from guideloom.workers.config import IngestConfig

TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers turn text into integer ids; storage keeps the ids in shards.",
    "A part is written by one task and committed by the driver.",
    "héllo wörld: ünïcode text survives the round trip.",
]


@pytest.fixture(scope="session")
def hf_tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAINING_TEXT * 20, trainer)
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tok.save(str(path))
    return path


def _doc_rows(n: int, *, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"id": i, "text": f"document {i}: " + TRAINING_TEXT[i % len(TRAINING_TEXT)] * (1 + i % 3)}
        for i in range(start, start + n)
    ]


@pytest.fixture
def doc_rows() -> Callable[..., list[dict[str, Any]]]:
    """doc_rows(n, start=0): ``n`` small documents of varying length, each with an ``id``."""
    return _doc_rows


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    def write(
        name: str, rows: Sequence[dict[str, Any] | str | bytes], compression: str | None = None
    ) -> Path:
        lines = []
        for row in rows:
            if isinstance(row, bytes):
                lines.append(row)
            elif isinstance(row, str):
                lines.append(row.encode())
            else:
                lines.append(json.dumps(row).encode())
        data = b"".join(line + b"\n" for line in lines)
        path = tmp_path / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if compression == "gzip":
            data = gzip.compress(data, mtime=0)
        elif compression == "zstd":
            import zstandard

            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
        return path

    return write


@pytest.fixture
def ingest_config() -> Callable[..., IngestConfig]:
    def make(inputs: Sequence[str | Path], output: str | Path, **options: Any) -> IngestConfig:
        options.setdefault("progress", "none")
        return IngestConfig(inputs=[str(i) for i in inputs], output=str(output), **options)

    return make
