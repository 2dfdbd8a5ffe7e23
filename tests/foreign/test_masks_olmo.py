"""OLMo-core / Dolma token arrays and per-token loss masks (datatrove ``.ds.loss``, OLMo label
masks) read in place: the ``loss_mask`` field, labels that honour it, document bounds from a
Dolma sidecar or an end-of-text scan; bad inputs named with their fix."""

from __future__ import annotations

import gzip
from typing import Any

import numpy as np
import pytest
from foreign_files import documents, masks_of, write_datatrove, write_olmo

import guideloom
from guideloom import StatefulDataLoader, StreamDataset
from guideloom.storage.foreign import ForeignFormatError

L = 64
IGNORE = -100


def _starts_in(lengths: list[int], window: int) -> list[int]:
    starts = np.cumsum([0, *lengths])[:-1]
    inside = starts[(starts >= window * L) & (starts < (window + 1) * L)]
    return (inside - window * L).tolist()


def _expected_labels(flat: np.ndarray, mask: np.ndarray, lengths: list[int], window: int) -> np.ndarray:
    """What labels=True gives window ``window``: the next token, -100 where the next token's mask
    is 0, at each document's last token and at the window's last token."""
    a = window * L
    lab = np.full(L, IGNORE, np.int64)
    lab[:-1] = flat[a + 1 : a + L]
    lab[:-1][mask[a + 1 : a + L] == 0] = IGNORE
    ends = np.cumsum(lengths) - 1
    for e in ends[(ends >= a) & (ends < a + L)]:
        lab[e - a] = IGNORE
    return lab


def _check_labels(storage: Any, flat: np.ndarray, mask: np.ndarray, lengths: list[int], **kw: Any) -> None:
    loader = StatefulDataLoader.from_storage(storage, sequence_length=L, batch_size=4, labels=True, **kw)
    seen = 0
    for step, batch in enumerate(loader):
        for row in range(batch["tokens"].shape[0]):
            w = step * 4 + row
            assert batch["tokens"][row].numpy().tolist() == flat[w * L : (w + 1) * L].tolist()
            assert batch["loss_mask"][row].numpy().tolist() == mask[w * L : (w + 1) * L].astype(int).tolist()
            assert batch["labels"][row].numpy().tolist() == _expected_labels(flat, mask, lengths, w).tolist()
            seen += 1
    assert seen == len(flat) // L


def test_datatrove_loss_files_are_the_loss_mask(tmp_path) -> None:
    docs = documents(50, seed=4)
    masks = masks_of(docs)
    write_datatrove(str(tmp_path / "000.ds"), docs[:25], masks=masks[:25])
    write_datatrove(str(tmp_path / "001.ds"), docs[25:], masks=masks[25:])
    storage = guideloom.open(str(tmp_path / "*.ds"))
    assert list(storage.format.fields) == ["tokens", "loss_mask"]
    flat, mask = np.concatenate(docs), np.concatenate(masks)
    ds = StreamDataset(storage, L)
    got = ds.read_windows([3, 0, len(ds) - 1])
    for row, w in enumerate([3, 0, len(ds) - 1]):  # windows across the two files included
        assert got["tokens"][row].tolist() == flat[w * L : (w + 1) * L].tolist()
        assert got["loss_mask"][row].tolist() == mask[w * L : (w + 1) * L].astype(int).tolist()
    _check_labels(storage, flat, mask, [len(d) for d in docs], boundaries="records")


def test_olmo_arrays_with_sidecar_and_label_masks(tmp_path) -> None:
    docs = documents(60, seed=6, vocab=100_000)
    masks = masks_of(docs)
    for k, part in enumerate((slice(0, 30), slice(30, 60))):
        write_olmo(
            str(tmp_path / f"token_ids_part_{k:04d}.npy"),
            docs[part],
            masks=masks[part],
            mask_path=str(tmp_path / f"labels_mask_{k:04d}.npy"),
        )
    storage = guideloom.open(
        str(tmp_path / "token_ids_part_*.npy"),
        format="olmo",
        dtype=np.uint32,
        label_masks=str(tmp_path / "labels_mask_*.npy"),
    )
    assert storage.kind == "olmo" and list(storage.format.fields) == ["tokens", "loss_mask"]
    lengths = [len(d) + 1 for d in docs]  # each document ends with the EOS id 0
    flat = np.concatenate([np.append(d, 0) for d in docs])
    mask = np.concatenate([np.append(m, True) for m in masks])
    ds = StreamDataset(storage, L)
    for w in range(len(ds)):  # record starts from the .csv.gz sidecars, across both arrays
        assert ds.record_starts(w).tolist() == _starts_in(lengths, w)
    _check_labels(storage, flat, mask, lengths, boundaries="records")
    # without the masks: one tokens field, documents still from the sidecars
    plain = guideloom.open(str(tmp_path / "token_ids_part_*.npy"), dtype=np.uint32)
    assert list(plain.format.fields) == ["tokens"] and plain.kind == "olmo"
    assert StreamDataset(plain, L).record_starts(2).tolist() == _starts_in(lengths, 2)


def test_olmo_without_sidecar_finds_documents_by_eos(tmp_path) -> None:
    docs = documents(40, seed=8)
    write_olmo(str(tmp_path / "part-0-00000.npy"), docs, dtype=np.uint16, eos=50279, sidecar=False)
    storage = guideloom.open(str(tmp_path / "part-0-00000.npy"), format="olmo", dtype=np.uint16, eos_id=50279)
    ds = StreamDataset(storage, L)
    assert not ds.has_record_starts
    flat = np.concatenate([np.append(d, 50279) for d in docs])
    assert np.array_equal(ds.read_windows([1])["tokens"][0], flat[L : 2 * L])
    batch = next(
        iter(StatefulDataLoader.from_storage(storage, sequence_length=L, batch_size=2, boundaries="eos"))
    )
    ends = np.flatnonzero(flat[: 2 * L] == 50279)
    restarts = sorted({0, L, *[e + 1 for e in ends if e + 1 < 2 * L]})
    assert np.flatnonzero(batch["position_ids"].numpy().reshape(-1) == 0).tolist() == restarts


def test_bad_masks_sidecars_and_dtypes_are_named(tmp_path) -> None:
    docs = documents(20, seed=9)
    write_olmo(str(tmp_path / "a.npy"), docs, masks=masks_of(docs), mask_path=str(tmp_path / "a_mask.npy"))
    with pytest.raises(ValueError, match=r"do not record their dtype; pass .*dtype=np.uint32"):
        guideloom.open(str(tmp_path / "a.npy"), format="olmo")
    with pytest.raises(ForeignFormatError, match=r"a.npy has \d+ bytes, not a whole number of uint64"):
        guideloom.open(str(tmp_path / "a.npy"), format="olmo", dtype=np.uint64)
    # a mask of another length than its tokens
    with open(tmp_path / "a_mask.npy", "ab") as f:
        f.write(b"\x01")
    with pytest.raises(
        ForeignFormatError, match=r"a_mask.npy has \d+ bytes, but .*a.npy holds \d+ tokens.*own mask"
    ):
        guideloom.open(str(tmp_path / "a.npy"), dtype=np.uint32, label_masks=str(tmp_path / "a_mask.npy"))
    with pytest.raises(ValueError, match="one mask file per token file"):
        guideloom.open(
            str(tmp_path / "a.npy"), dtype=np.uint32, label_masks=[str(tmp_path / "a_mask.npy")] * 2
        )
    # a sidecar whose bounds overrun the array
    with open(tmp_path / "a.csv.gz", "wb") as f:
        f.write(gzip.compress(b"0,10,x,1\n10,999999,x,2\n"))
    with pytest.raises(
        ForeignFormatError, match=r"a.csv.gz row 2 gives the document \[10, 999999\).*own .csv.gz"
    ):
        guideloom.open(str(tmp_path / "a.npy"), dtype=np.uint32)
    # datatrove: a .ds.loss of another length, and one file of two without its mask
    write_datatrove(str(tmp_path / "x.ds"), docs, masks=masks_of(docs))
    with open(tmp_path / "x.ds.loss", "r+b") as f:
        f.truncate(10)
    with pytest.raises(ForeignFormatError, match=r"x.ds.loss has 10 bytes, but .*x.ds holds"):
        guideloom.open(str(tmp_path / "x.ds"))
    write_datatrove(str(tmp_path / "x.ds"), docs, masks=masks_of(docs))
    write_datatrove(str(tmp_path / "y.ds"), docs)
    with pytest.raises(ForeignFormatError, match=r"y.ds.loss is missing, but other .ds files"):
        guideloom.open([str(tmp_path / "x.ds"), str(tmp_path / "y.ds")])


@pytest.mark.s3
def test_olmo_masks_from_s3_match_local(tmp_path, s3_bucket: str, s3_options: dict[str, Any]) -> None:
    docs = documents(40, seed=10)
    masks = masks_of(docs)
    urls = {}
    for where, root, options in (("local", str(tmp_path), {}), ("s3", f"s3://{s3_bucket}/olmo", s3_options)):
        write_olmo(f"{root}/t.npy", docs, masks=masks, mask_path=f"{root}/m.npy", **options)
        urls[where] = (f"{root}/t.npy", f"{root}/m.npy", options)
    out = {}
    for where, (url, mask, options) in urls.items():
        storage = guideloom.open(url, dtype=np.uint32, label_masks=mask, storage_options=options or None)
        loader = StatefulDataLoader.from_storage(
            storage, sequence_length=L, batch_size=4, shuffle=True, boundaries="records", labels=True
        )
        out[where] = [{k: v.numpy().tolist() for k, v in b.items() if k != "max_seqlen"} for b in loader]
    assert out["s3"] == out["local"] and len(out["s3"]) > 2
