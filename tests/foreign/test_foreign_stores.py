"""Foreign token files on GCS and Azure Blob (their emulators on 127.0.0.1): the same windows,
record starts, loader epochs and resume as the same files on local disk; convert from the store
and export to it; a truncated file named."""

from __future__ import annotations

from typing import Any

import fsspec
import numpy as np
import pytest
from foreign_files import documents, masks_of, write_datatrove, write_megatron

import guideloom
from guideloom import StatefulDataLoader, StreamDataset
from guideloom.storage.foreign import ForeignFormatError
from guideloom.storage.foreign.convert import convert_foreign
from guideloom.storage.foreign.export import export_megatron

L = 32


@pytest.fixture(
    params=[pytest.param("gs", marks=pytest.mark.gcs), pytest.param("az", marks=pytest.mark.azure)]
)
def store(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(root URL of a fresh bucket, storage_options)`` on the GCS emulator, then on azurite."""
    if request.param == "gs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        return f"gs://{request.getfixturevalue('gs_bucket')}", endpoint.storage_options()
    endpoint = request.getfixturevalue("azure_endpoint")
    return f"az://{request.getfixturevalue('az_container')}", endpoint.storage_options()


def _epoch(storage: Any, **settings: Any) -> list[list[int]]:
    loader = StatefulDataLoader.from_storage(storage, **settings)
    return [b["tokens"].flatten().tolist() + b["position_ids"].flatten().tolist() for b in loader]


def test_megatron_and_datatrove_files_read_from_the_store_as_from_disk(
    store: tuple[str, dict[str, Any]], tmp_path: Any
) -> None:
    root, options = store
    docs = documents(120, seed=21)
    write_megatron(f"{root}/mega/text_document", docs, storage_options=options)
    write_megatron(str(tmp_path / "text_document"), docs)
    remote = guideloom.open(f"{root}/mega/text_document.idx", storage_options=options)
    local = guideloom.open(str(tmp_path / "text_document.idx"))
    a, b = StreamDataset(remote, L), StreamDataset(local, L)
    every = list(range(len(b)))
    assert len(a) == len(b) and np.array_equal(
        a.read_windows(every)["tokens"], b.read_windows(every)["tokens"]
    )
    assert all(
        np.array_equal(x, y) for x, y in zip(a.record_starts_batch(every), b.record_starts_batch(every))
    )

    write_datatrove(f"{root}/dt/000.ds", docs, masks=masks_of(docs), **options)
    write_datatrove(str(tmp_path / "000.ds"), docs, masks=masks_of(docs))
    settings: dict[str, Any] = dict(
        sequence_length=L, batch_size=4, shuffle="block", seed=3, boundaries="records"
    )
    dt_remote = guideloom.open(f"{root}/dt/000.ds", storage_options=options)
    assert list(dt_remote.format.fields) == ["tokens", "loss_mask"]
    expected = _epoch(guideloom.open(str(tmp_path / "000.ds")), **settings)
    assert _epoch(dt_remote, **settings) == expected
    first = StatefulDataLoader.from_storage(dt_remote, **settings)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    second = StatefulDataLoader.from_storage(dt_remote, **settings)
    second.load_state_dict(state)
    rest = [b["tokens"].flatten().tolist() + b["position_ids"].flatten().tolist() for b in second]
    assert [
        b["tokens"].flatten().tolist() + b["position_ids"].flatten().tolist() for b in head
    ] + rest == expected


def test_convert_from_and_export_to_the_store(store: tuple[str, dict[str, Any]], tmp_path: Any) -> None:
    root, options = store
    docs = documents(80, seed=22)
    write_megatron(f"{root}/in/part", docs, storage_options=options)
    source = guideloom.open(f"{root}/in/part.bin", format="megatron", storage_options=options)
    convert_foreign(source, str(tmp_path / "native"))
    native = guideloom.open(str(tmp_path / "native"))
    assert native.manifest.total_records == len(docs)
    export_megatron(native, f"{root}/out/part", storage_options=options)
    back = StreamDataset(guideloom.open(f"{root}/out/part.idx", storage_options=options), 1)
    every = list(range(len(back)))
    assert np.array_equal(back.read_windows(every)["tokens"].reshape(-1), np.concatenate(docs))
    starts = np.cumsum([0] + [len(d) for d in docs])[:-1]
    assert np.flatnonzero(back.record_starts_batch(every)[1]).tolist() == starts.tolist()

    fs, path = fsspec.core.url_to_fs(f"{root}/in/part.bin", **options)
    fs.pipe_file(path, fs.cat_file(path)[:-6])  # three tokens short
    with pytest.raises(ForeignFormatError, match="part.bin.*truncated"):
        guideloom.open(f"{root}/in/part.idx", storage_options=options)
