"""The exact-duplicate hashes (`guideloom.manifest.hashindex`): what a collision would cost and
why it is negligible at 128 bits, and the piece format's checks. No Ray, no storage."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom.manifest.hashindex import (
    BUCKETS,
    HashIndex,
    bucket_of,
    collision_probability,
    hash_texts,
    normalize_text,
    pack_piece,
    unpack_piece,
)


def test_the_birthday_bound_predicts_collisions_of_a_narrow_hash_and_is_negligible_at_128_bits():
    # A collision would drop one document that is not a duplicate. Checked where collisions are
    # common (the hash cut to 20 bits): the bound's expected number of colliding pairs matches
    # what happens; at 128 bits the same formula gives the chance for a whole corpus.
    n = 4000
    digests = hash_texts([f"document {i}" for i in range(n)])
    narrow = np.frombuffer(digests.tobytes(), np.uint8).reshape(n, 16)[:, :3].astype(np.int64)
    keys = (narrow[:, 0] << 12) | (narrow[:, 1] << 4) | (narrow[:, 2] >> 4)  # 20 bits
    _, counts = np.unique(keys, return_counts=True)
    pairs = int((counts * (counts - 1) // 2).sum())
    expected = collision_probability(n, bits=20)  # about 7.6 pairs expected
    assert expected / 3 < pairs < expected * 3
    assert collision_probability(10**12) < 1.5e-15  # a trillion documents
    assert collision_probability(10**9) < 1.5e-21  # a billion
    assert len(set(digests.tolist())) == n  # at 128 bits: none among these


def test_hashes_normalisation_and_buckets():
    h = hash_texts(["same", "same", "other"])
    assert h.dtype == np.dtype("S16") and h[0] == h[1] != h[2]
    assert normalize_text(" Caf\u0065\u0301\n\tAU  lait ") == normalize_text("café au lait")
    assert set(bucket_of(hash_texts([str(i) for i in range(500)])).tolist()) == set(range(BUCKETS))


def test_a_piece_round_trips_and_a_damaged_one_is_named():
    hashes = np.unique(hash_texts(["a", "b", "c"]))
    data = pack_piece(3, hashes)
    bucket, back = unpack_piece(data, "p.bin")
    assert bucket == 3 and back.tolist() == hashes.tolist()
    with pytest.raises(ValueError, match="p.bin holds"):
        unpack_piece(data[:-1], "p.bin")
    with pytest.raises(ValueError, match="not a version 1 hash piece"):
        unpack_piece(b"X" * len(data), "p.bin")
    with pytest.raises(ValueError, match="not in snapshots/hashes/"):
        HashIndex.model_validate(
            {
                "normalize": False,
                "documents": 1,
                "pieces": [{"path": "../x", "bucket": 0, "count": 1, "bytes": 1, "sha256": "x"}],
            }
        )
