"""guideloom.layout is the one owner of the on-disk layout: one table of file kinds, the files of
each layout, paths, headers and checksums, which the manifest models and the writer both use."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xxhash
from pydantic import ValidationError

from guideloom import DocumentJsonFormat, DocumentStorage, StreamNumpyFormat, StreamStorage, layout
from guideloom.manifest import FileInfo, Manifest
from guideloom.storage.encoders import ENCODERS
from guideloom.types import LAYOUTS


def test_every_layout_has_its_files_and_its_encoder() -> None:
    assert set(layout.LAYOUT_FILES) == set(LAYOUTS) == set(ENCODERS)
    for name, files in layout.LAYOUT_FILES.items():
        assert ENCODERS[name].layout == name
        assert list(files)[0] == "data"  # every shard has a data file; the manifest needs it
        assert all(kind.name == file for file, kind in files.items())
    assert {kind.name for kind in layout.KINDS.values()} == set(layout.FILES)
    assert len({kind.code for kind in layout.KINDS.values()}) == len(layout.KINDS)
    fixed = {k.extension: k.itemsize for k in layout.KINDS.values()}
    assert fixed == {
        "tokens": 0,
        "docs": 1,
        "docs.idx": 8,
        "meta": 1,
        "spans": 32,
        "spans.dir": 32,
        "starts": 8,
    }
    assert layout.HEADER_STRUCT.size == layout.HEADER_SIZE == 32


def test_paths_parse_back() -> None:
    path = layout.shard_file_path(3, 12, "docs.idx", "shards/r-x/a-1")
    assert path == "shards/r-x/a-1/part-00003/shard-00012.docs.idx"
    assert layout.parse_shard_file_path(path, 3, 12) == ("shards/r-x/a-1", "docs.idx")
    assert layout.parse_shard_file_path(path, 3, 11) is None
    assert layout.shard_file_extension(path) == "docs.idx"
    assert layout.run_of_prefix("shards/r-x/a-1") == "x" and layout.run_of_prefix("shards/w-1") is None
    assert layout.attempt_prefix_of(path) == "shards/r-x/a-1"
    assert layout.parts_folder_run("r-job") == "job" and layout.parts_folder_run("part-00000.json") is None
    with pytest.raises(ValueError, match="unknown shard file kind 'exe'"):
        layout.shard_file_path(0, 0, "exe")


def test_checksums_have_one_rule() -> None:
    value = layout.checksum(xxhash.xxh3_64(b"abc"))
    assert value == f"xxh3_64:{xxhash.xxh3_64_hexdigest(b'abc')}"
    assert layout.parse_checksum(value) == xxhash.xxh3_64_intdigest(b"abc")
    digest = value.split(":")[1]
    for bad in ("md5:abc", "xxh3_64:" + digest.upper(), value + "\n", "xxh3_64:0x" + digest[2:], value[:-1]):
        with pytest.raises(ValueError, match="is not 'xxh3_64:<16 hex digits>'"):
            layout.parse_checksum(bad)
        # a part record's files and the manifest's columns refuse the same values
        with pytest.raises(ValidationError):
            FileInfo(path="shards/part-00000/shard-00000.tokens", size=32, checksum=bad)


def test_header_counts_follow_the_table(tmp_path) -> None:
    storage = DocumentStorage(str(tmp_path / "docs"), DocumentJsonFormat())
    with storage.writer() as w:
        for i in range(5):
            w.append({"i": i})
    table = storage.manifest.shard_table
    assert list(table.files) == list(layout.LAYOUT_FILES["documents"])
    for name, kind in layout.LAYOUT_FILES["documents"].items():
        raw = (tmp_path / "docs" / table.path(0, name)).read_bytes()
        header = layout.ShardHeader.unpack(raw, name)
        assert header.kind == kind.extension == table.files[name].kind
        expected = layout.item_count(
            kind, records=5, tokens=0, spans=0, nbytes=table.size(0, name) - layout.HEADER_SIZE
        )
        assert header.count == expected and len(raw) == layout.HEADER_SIZE + header.count * header.itemsize


def test_fixed_item_sizes_are_checked_from_the_table(tmp_path) -> None:
    """The manifest checks every file whose item size is fixed and whose count is a column
    (an offsets index here), with the sizes the layout table gives."""
    storage = StreamStorage(str(tmp_path / "s"), StreamNumpyFormat({"tokens": np.uint16}))
    with storage.writer() as w:
        w.append({"tokens": np.arange(4)})
    d = json.loads(storage.manifest.to_json())
    Manifest.model_validate(d)  # as written: fine
    d["shard_table"]["files"]["data"]["kind"] = "docs.idx"  # tokens claimed to be an index
    with pytest.raises(ValidationError, match="docs.idx file has 40 bytes, but 48 are needed"):
        Manifest.model_validate(d)
