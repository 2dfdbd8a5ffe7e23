"""Foreign token files on S3: read in place by range requests, the index never fetched whole."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from foreign_files import documents, write_datatrove, write_megatron

import guideloom
from guideloom import StatefulDataLoader, StreamDataset

pytestmark = pytest.mark.s3

L = 256


def _gets(proxy: Any, suffix: str) -> list[Any]:
    return [e for e in proxy.log if e.method == "GET" and e.path.split("?")[0].endswith(suffix)]


def test_one_window_is_one_range_request_and_the_index_is_read_in_pages(
    s3_bucket: str, s3_options: dict[str, Any], counting_s3: Any
) -> None:
    # 20,000 documents: an .idx of about 400 KB, a .bin of about 8 MB.
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50_000, size=int(n)) for n in rng.integers(1, 400, size=20_000)]
    prefix = f"s3://{s3_bucket}/mega/text_document"
    write_megatron(prefix, docs, storage_options=s3_options)
    flat = np.concatenate(docs)
    counting_s3.reset()
    storage = guideloom.open(prefix + ".idx", storage_options=counting_s3.storage_options)
    opening = counting_s3.request_count
    ds = StreamDataset(storage, L)
    counting_s3.reset()
    w = len(ds) // 2
    assert np.array_equal(ds[w]["tokens"], flat[w * L : (w + 1) * L])
    gets = _gets(counting_s3, ".bin")
    assert len(gets) == 1 and gets[0].bytes == L * 2, gets  # one range, exactly the window's bytes
    assert not _gets(counting_s3, ".idx")

    idx_size = storage.files[0].index_size
    counting_s3.reset()
    starts = np.cumsum([0] + [len(d) for d in docs])[:-1]
    expected = (starts[(starts >= w * L) & (starts < (w + 1) * L)] - w * L).tolist()
    assert ds.record_starts(w).tolist() == expected
    idx_bytes = sum(e.bytes for e in _gets(counting_s3, ".idx"))
    assert 0 < idx_bytes <= 4 * 65536 and idx_bytes < idx_size / 2, (idx_bytes, idx_size)
    print(
        f"\nopen: {opening} requests; one window: 1 GET of {L * 2} bytes; its record starts: "
        f"{len(_gets(counting_s3, '.idx'))} GETs, {idx_bytes} of the .idx's {idx_size} bytes"
    )


def test_a_shuffled_epoch_from_s3_matches_local_and_resumes(
    s3_bucket: str, s3_options: dict[str, Any], counting_s3: Any, tmp_path: Any
) -> None:
    docs = documents(200, seed=4)
    write_datatrove(f"s3://{s3_bucket}/dt/000.ds", docs, **s3_options)
    write_datatrove(str(tmp_path / "000.ds"), docs)
    settings: dict[str, Any] = {
        "sequence_length": 32,
        "batch_size": 8,
        "shuffle": "block",
        "seed": 2,
        "boundaries": "records",
    }

    def batches(loader: Any) -> list[list[int]]:
        return [b["tokens"].flatten().tolist() + b["position_ids"].flatten().tolist() for b in loader]

    local = batches(StatefulDataLoader.from_storage(guideloom.open(str(tmp_path / "000.ds")), **settings))
    remote_storage = guideloom.open(
        f"s3://{s3_bucket}/dt/000.ds", storage_options=counting_s3.storage_options
    )
    counting_s3.reset()
    loader = StatefulDataLoader.from_storage(remote_storage, **settings)
    got = batches(loader)
    assert got == local
    data = _gets(counting_s3, ".ds")
    delivered = sum(len(b) // 2 for b in local) * 2  # token bytes of the epoch's windows
    windows = sum(len(b) // 2 for b in local) // 32
    fetched = sum(e.bytes for e in data)
    assert fetched <= 1.2 * delivered, (fetched, delivered)
    assert len(data) < windows / 2, (len(data), windows)  # many windows per request
    print(
        f"\nshuffled epoch: {len(data)} GETs for {windows} windows, {fetched / delivered:.3f}x the bytes delivered"
    )
    # resume on S3 mid-epoch: the rest is the rest of the local epoch
    first = StatefulDataLoader.from_storage(remote_storage, **settings)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    second = StatefulDataLoader.from_storage(remote_storage, **settings)
    second.load_state_dict(state)
    assert batches(head) + batches(second) == local
