"""More bad foreign inputs, each named with its fix: empty lists, mixed layouts, mismatched
dtypes, damaged Dolma sidecars, unknown llm.c versions; and what a read-only foreign storage
answers."""

from __future__ import annotations

import gzip
import os
from typing import Any

import numpy as np
import pytest
from foreign_files import documents, write_datatrove, write_llmc, write_megatron, write_nanogpt, write_olmo

from guideloom.storage.foreign import ForeignFormatError, open_foreign


def test_no_files_and_mixed_layouts_are_named(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="no files given: pass a path, a URL, a glob or a list of them"):
        open_foreign([])
    write_datatrove(str(tmp_path / "a.ds"), documents(5))
    write_nanogpt(str(tmp_path / "b.bin"), documents(5))
    with pytest.raises(ValueError, match="the files mix layouts \\(datatrove, nanogpt\\): open each layout"):
        open_foreign([str(tmp_path / "a.ds"), str(tmp_path / "b.bin")])


def test_label_masks_are_refused_for_llmc(tmp_path: Any) -> None:
    write_llmc(str(tmp_path / "s.bin"), documents(5))
    (tmp_path / "s.mask").write_bytes(b"\1" * 10)
    with pytest.raises(
        ValueError, match="label_masks= is for datatrove, OLMo and nanoGPT files, not llmc files"
    ):
        open_foreign(str(tmp_path / "s.bin"), label_masks=str(tmp_path / "s.mask"))


def test_megatron_dtypes_must_agree(tmp_path: Any) -> None:
    write_megatron(str(tmp_path / "a"), documents(5), np.uint16)
    write_megatron(str(tmp_path / "b"), documents(5, seed=1), np.int32)
    with pytest.raises(ForeignFormatError, match="hold tokens of different dtypes \\(int32, uint16"):
        open_foreign([str(tmp_path / "a.idx"), str(tmp_path / "b.idx")])
    with pytest.raises(ValueError, match="dtype=int32 but .*a.idx records uint16: leave dtype out"):
        open_foreign(str(tmp_path / "a.idx"), dtype=np.int32)
    assert open_foreign(str(tmp_path / "a.idx"), dtype=np.uint16).manifest.total_records == 5


def test_a_missing_file_names_the_pair_it_looked_for(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="gone.tok does not exist \\(nor .*gone.tok.idx\\)"):
        open_foreign(str(tmp_path / "gone.tok"))


def test_an_llmc_version_of_unknown_dtype_needs_dtype(tmp_path: Any) -> None:
    path = str(tmp_path / "v7.bin")
    docs = documents(5)
    write_llmc(path, docs)
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(np.int32(7).tobytes())
    with pytest.raises(
        ForeignFormatError, match="llm.c shard of version 7, whose token dtype .* pass dtype="
    ):
        open_foreign(path)
    storage = open_foreign(path, dtype=np.uint16)
    assert storage.manifest.total_tokens == sum(len(d) + 1 for d in docs)


def _olmo(tmp_path: Any, name: str, n: int = 6, seed: int = 0) -> str:
    path = str(tmp_path / f"{name}.npy")
    write_olmo(path, documents(n, seed=seed), np.uint32)
    return path


def test_dolma_sidecars_with_a_header_are_read_and_damaged_ones_named(tmp_path: Any) -> None:
    path = _olmo(tmp_path, "part-0")
    sidecar = tmp_path / "part-0.csv.gz"
    rows = gzip.decompress(sidecar.read_bytes()).decode()
    sidecar.write_bytes(gzip.compress(("start,end,path,id\n\n" + rows).encode()))  # a header, a blank line
    assert open_foreign(path, format="olmo", dtype=np.uint32).manifest.total_records == 6
    sidecar.write_bytes(gzip.compress((rows + "12,x,p,id\n").encode()))
    with pytest.raises(
        ForeignFormatError, match="part-0.csv.gz row 7 is \\['12', 'x'\\], not a start and an end"
    ):
        open_foreign(path, format="olmo", dtype=np.uint32)
    sidecar.write_bytes(b"not gzip at all")
    with pytest.raises(ForeignFormatError, match="part-0.csv.gz is not a gzipped CSV .*give eos_id="):
        open_foreign(path, format="olmo", dtype=np.uint32)


def test_dolma_arrays_need_all_or_no_sidecars(tmp_path: Any) -> None:
    a, b = _olmo(tmp_path, "a"), _olmo(tmp_path, "b", seed=2)
    os.remove(tmp_path / "b.csv.gz")
    with pytest.raises(ForeignFormatError, match="b.csv.gz is missing, but other arrays .* have their"):
        open_foreign([a, b], format="olmo", dtype=np.uint32)


def test_a_foreign_storage_is_read_only_and_has_no_history(tmp_path: Any) -> None:
    write_megatron(str(tmp_path / "m"), documents(5), np.uint16)
    storage = open_foreign(str(tmp_path / "m.idx"))
    assert storage.exists() and storage.snapshots() == [] and storage.current_snapshot is None
    assert storage.refresh() is storage.manifest
    assert repr(storage).startswith("ForeignStorage(") and "format='megatron'" in repr(storage)
    for call in (
        lambda: storage.commit(1),
        storage.delete,
        lambda: storage.at_snapshot(0),
        storage.verify,
    ):
        with pytest.raises(TypeError, match="is a megatron dataset read in place; GuideLoom does not"):
            call()
