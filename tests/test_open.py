"""guideloom.open(url): the storage class and format the manifest records, never a class imported
on a manifest's word; StatefulDataLoader.from_storage(url) the same way."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import guideloom
from guideloom import (
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    DocumentStorage,
    DocumentStorageFormat,
    StreamNumpyFormat,
    StreamStorage,
    StreamWithMetaJsonFormat,
    StreamWithMetaMsgpackFormat,
    StreamWithMetaStorage,
)
from guideloom.errors import DatasetNotFoundError, PluginError
from guideloom.storage.byurl import FORMATS


def _documents(url: str, fmt: Any, options: dict[str, Any] | None = None) -> list[Any]:
    records = [{"id": i, "text": f"doc {i}"} for i in range(5)]
    with DocumentStorage(url, fmt, storage_options=options).writer() as w:
        for r in records:
            w.append(r)
    return records


def _stream(url: str, options: dict[str, Any] | None = None) -> np.ndarray:
    fmt = StreamNumpyFormat({"tokens": np.uint32, "doc_index": np.uint16})
    tokens = np.arange(40, dtype=np.uint32)
    with StreamStorage(url, fmt, storage_options=options).writer() as w:
        w.append({"tokens": tokens, "doc_index": np.zeros(40, np.uint16)})
    return tokens


@pytest.mark.parametrize("fmt", [DocumentJsonFormat(), DocumentMsgpackFormat(), DocumentPickleFormat(4)])
def test_documents_open_with_their_recorded_format(tmp_path: Path, fmt: Any) -> None:
    url = str(tmp_path / "docs")
    records = _documents(url, fmt)
    storage = guideloom.open(url)
    assert type(storage) is DocumentStorage and storage.format == fmt
    assert type(storage.format) is type(fmt) and storage.format.config() == fmt.config()
    assert list(guideloom.DocumentDataset(storage)) == records


def test_a_stream_opens_with_its_fields_and_dtypes(tmp_path: Path) -> None:
    url = str(tmp_path / "stream")
    tokens = _stream(url)
    storage = guideloom.open(url)
    assert type(storage) is StreamStorage
    assert storage.format == StreamNumpyFormat({"tokens": np.uint32, "doc_index": np.uint16})
    window = guideloom.StreamDataset(storage, sequence_length=8)[1]
    assert np.array_equal(np.asarray(window["tokens"]), tokens[8:16])


@pytest.mark.parametrize("cls", [StreamWithMetaJsonFormat, StreamWithMetaMsgpackFormat])
def test_a_stream_with_meta_opens_with_its_format(tmp_path: Path, cls: Any) -> None:
    url = str(tmp_path / "meta")
    fmt = cls(StreamNumpyFormat({"tokens": np.uint16}))
    with StreamWithMetaStorage(url, fmt).writer() as w:
        w.append({"tokens": np.arange(12, dtype=np.uint16)}, spans=[(0, 3, {"tag": "a"})])
    storage = guideloom.open(url)
    assert type(storage) is StreamWithMetaStorage and type(storage.format) is cls and storage.format == fmt
    assert len(guideloom.StreamWithMetaDataset(storage, sequence_length=4)) == 3


def test_open_on_s3(s3_bucket: str, s3_options: dict[str, Any]) -> None:
    url = f"s3://{s3_bucket}/stream"
    tokens = _stream(url, s3_options)
    storage = guideloom.open(url, storage_options=s3_options)
    assert type(storage) is StreamStorage and storage.manifest.total_tokens == len(tokens)
    loader = guideloom.StatefulDataLoader.from_storage(
        url, storage_options=s3_options, sequence_length=8, batch_size=5
    )
    (batch,) = list(loader)
    assert np.array_equal(batch["tokens"].numpy().ravel(), tokens)


def test_a_snapshot_is_passed_on(tmp_path: Path) -> None:
    url = str(tmp_path / "docs")
    _documents(url, DocumentJsonFormat())
    first = DocumentStorage(url, DocumentJsonFormat()).current_snapshot.id
    with DocumentStorage(url, DocumentJsonFormat()).writer(append=True) as w:
        w.append({"id": 99})
    assert len(guideloom.DocumentDataset(guideloom.open(url))) == 6
    assert len(guideloom.DocumentDataset(guideloom.open(url, snapshot=first))) == 5


class ConceptFormat(DocumentStorageFormat):
    """A user's own format: documents as JSON under a prefix, which its config records."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def config(self) -> dict[str, Any]:
        return {"prefix": self.prefix}

    def encode(self, record: Any) -> bytes:
        return (self.prefix + json.dumps(record)).encode()

    def decode(self, data: bytes | memoryview) -> Any:
        return json.loads(bytes(data).decode()[len(self.prefix) :])


@pytest.fixture
def clean_formats() -> Any:
    saved, installed = dict(FORMATS._items), FORMATS._entry_points
    FORMATS._items.clear()
    FORMATS._entry_points = None
    yield FORMATS
    FORMATS._items.clear()
    FORMATS._items.update(saved)
    FORMATS._entry_points = installed


def test_an_unregistered_format_names_its_class_and_how_to_register(
    tmp_path: Path, clean_formats: Any
) -> None:
    url = str(tmp_path / "concept")
    _documents(url, ConceptFormat(">"))
    with pytest.raises(PluginError) as err:
        guideloom.open(url)
    text = str(err.value)
    assert f"{__name__}.ConceptFormat" in text and "{'prefix': '>'}" in text
    assert "does not import a class because a manifest names it" in text
    assert "guideloom.storage.byurl.FORMATS.register('ConceptFormat', ConceptFormat)" in text
    assert '[project.entry-points."guideloom.formats"]' in text
    assert f'ConceptFormat = "{__name__}:ConceptFormat"' in text
    # the fix, as the message writes it, opens the dataset
    guideloom.storage.byurl.FORMATS.register("ConceptFormat", ConceptFormat)
    storage = guideloom.open(url)
    assert storage.format == ConceptFormat(">") and guideloom.DocumentDataset(storage)[2] == {
        "id": 2,
        "text": "doc 2",
    }


def test_a_format_registered_as_a_function_of_its_config(tmp_path: Path, clean_formats: Any) -> None:
    url = str(tmp_path / "concept")
    _documents(url, ConceptFormat("#"))
    seen: list[dict[str, Any]] = []

    def build(config: dict[str, Any]) -> ConceptFormat:
        seen.append(config)
        return ConceptFormat(config["prefix"])

    clean_formats.register("ConceptFormat", build)
    assert guideloom.open(url).format == ConceptFormat("#") and seen == [{"prefix": "#"}]


def test_a_format_from_an_installed_entry_point(tmp_path: Path, clean_formats: Any, monkeypatch: Any) -> None:
    # a real installed distribution on sys.path, with an entry point in the group guideloom.formats
    site = tmp_path / "site"
    (site / "plugfmt").mkdir(parents=True)
    (site / "plugfmt" / "__init__.py").write_text(
        textwrap.dedent(
            """
            import json
            from guideloom import DocumentStorageFormat

            class UpperFormat(DocumentStorageFormat):
                def encode(self, record):
                    return json.dumps(record).upper().encode()

                def decode(self, data):
                    return json.loads(bytes(data).decode())
            """
        )
    )
    info = site / "plugfmt-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugfmt\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[guideloom.formats]\nUpperFormat = plugfmt:UpperFormat\n")
    monkeypatch.syspath_prepend(str(site))
    import plugfmt

    url = str(tmp_path / "upper")
    with DocumentStorage(url, plugfmt.UpperFormat()).writer() as w:
        w.append(["a", 1])
    del sys.modules["plugfmt"]  # opening must import it through the entry point, not the manifest
    storage = guideloom.open(url)
    assert type(storage.format).__name__ == "UpperFormat" and guideloom.DocumentDataset(storage)[0] == [
        "A",
        1,
    ]
    monkeypatch.delitem(sys.modules, "plugfmt", raising=False)


def test_a_manifest_never_makes_open_import_a_module(tmp_path: Path, clean_formats: Any) -> None:
    class Payload(DocumentJsonFormat):
        pass

    Payload.__module__ = "guideloom_open_test_payload"  # the manifest names a module on sys.path
    Payload.__qualname__ = "Payload"
    url = str(tmp_path / "evil")
    _documents(url, Payload())
    (tmp_path / "guideloom_open_test_payload.py").write_text("raise SystemExit('imported!')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(PluginError, match="guideloom_open_test_payload.Payload"):
            guideloom.open(url)
        assert "guideloom_open_test_payload" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path))


def test_a_missing_dataset(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError):
        guideloom.open(str(tmp_path / "nothing"))
    with pytest.raises(DatasetNotFoundError):
        guideloom.StatefulDataLoader.from_storage(str(tmp_path / "nothing"), batch_size=2)


def test_from_storage_takes_a_url_or_a_path(tmp_path: Path) -> None:
    url = tmp_path / "docs"
    records = _documents(str(url), DocumentJsonFormat())
    for given in (str(url), url):
        loader = guideloom.StatefulDataLoader.from_storage(given, batch_size=5)
        assert [r for batch in loader for r in batch] == records
    with pytest.raises(TypeError, match="storage_options= is for a storage given as a URL"):
        guideloom.StatefulDataLoader.from_storage(guideloom.open(str(url)), storage_options={})


def test_from_storage_names_its_order_and_read_ahead_parameters(tmp_path: Path) -> None:
    params = inspect.signature(guideloom.StatefulDataLoader.from_storage).parameters
    for name in (
        "shuffle_block_size",
        "shuffle_buffer_blocks",
        "shuffle_run_size",
        "read_ahead",
        "read_ahead_bytes",
    ):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert f"{name}:" in (guideloom.StatefulDataLoader.from_storage.__doc__ or ""), name
    url = str(tmp_path / "stream")
    _stream(url)
    kw: dict[str, Any] = {"sequence_length": 2, "batch_size": 4, "shuffle": "block", "seed": 3}
    blocks = dict(shuffle_block_size=4, shuffle_buffer_blocks=2, shuffle_run_size=2)
    a = [b["tokens"].tolist() for b in guideloom.StatefulDataLoader.from_storage(url, **kw, **blocks)]
    b = [
        b["tokens"].tolist()
        for b in guideloom.StatefulDataLoader.from_storage(url, **kw, **blocks, read_ahead=2)
    ]
    c = [b["tokens"].tolist() for b in guideloom.StatefulDataLoader.from_storage(url, **kw)]
    assert a == b and a != c  # the block settings reach the order; read-ahead never changes it
    with pytest.raises(ValueError, match="shuffle_run_size"):
        guideloom.StatefulDataLoader.from_storage(url, **kw, shuffle_block_size=4, shuffle_run_size=3)


def test_a_registered_format_that_builds_another_config_is_refused(
    tmp_path: Path, clean_formats: Any
) -> None:
    from guideloom.errors import SchemaMismatchError

    url = str(tmp_path / "concept")
    _documents(url, ConceptFormat(">"))
    clean_formats.register("ConceptFormat", lambda config: ConceptFormat("<"))
    with pytest.raises(SchemaMismatchError) as err:
        guideloom.open(url)
    assert "{'prefix': '>'}" in str(err.value) and "{'prefix': '<'}" in str(err.value)
