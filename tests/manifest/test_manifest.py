"""The manifest model: validation with messages that say what is wrong, and compact columns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from guideloom import StreamNumpyFormat, StreamStorage
from guideloom.errors import ManifestError
from guideloom.manifest import Manifest, parse_manifest


@pytest.fixture
def manifest_dict(tmp_path) -> dict:
    storage = StreamStorage(str(tmp_path / "ds"), StreamNumpyFormat({"tokens": np.uint16}))
    with storage.writer(shard_size=10) as w:
        for i in range(4):
            w.append({"tokens": np.arange(5) + i})
    return json.loads(storage.manifest.to_json())


def reparse(d: dict) -> Manifest:
    return parse_manifest(json.dumps(d).encode(), "s3://b/ds/manifest.json")


def test_round_trip_and_lazy_shards(manifest_dict):
    m = reparse(manifest_dict)
    assert m.num_shards == 4 and len(m.shards) == 4
    assert m.shards[2].files["data"].path.endswith("/part-00000/shard-00002.tokens")
    assert m.shards[2].tokens == 5 and m.total_tokens == 20
    assert reparse(json.loads(m.to_json())).fingerprint == m.fingerprint


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["shard_table"]["tokens"].pop(), "column tokens has 3 rows, 'part' has 4"),
        (lambda d: d["shard_table"]["files"]["data"]["checksum"].__setitem__(1, "md5:abc"), "checksum"),
        (lambda d: d["shard_table"]["index"].reverse(), r"not in \(part, index\) order"),
        (lambda d: d["shard_table"]["prefix"].__setitem__(0, "../escape"), "must be relative"),
        (lambda d: d.__setitem__("total_tokens", 21), "total_tokens is 21 but the shards add up to 20"),
        (
            lambda d: d["shard_table"]["files"]["data"]["size"].__setitem__(0, -1),
            "greater than or equal to 0",
        ),
        (lambda d: d.__setitem__("surprise", 1), "Extra inputs are not permitted"),
        # a count is a JSON integer: not true, 4.0 or "4" (parsed strictly, in pydantic's core)
        (lambda d: d["shard_table"]["tokens"].__setitem__(0, True), r"shard_table.tokens.0: .*integer"),
        (lambda d: d["shard_table"]["files"]["data"]["size"].__setitem__(2, 10.0), r"size.2: .*integer"),
        (lambda d: d.__setitem__("total_tokens", "20"), r"total_tokens: .*integer"),
        (lambda d: d["shard_table"]["files"]["data"].__setitem__("kind", "exe"), "unknown kind"),
    ],
)
def test_invalid_manifests_are_refused(manifest_dict, mutate, message):
    mutate(manifest_dict)
    with pytest.raises(ManifestError, match=message) as info:
        reparse(manifest_dict)
    assert "s3://b/ds/manifest.json is invalid" in str(info.value)


def test_many_shards_stay_compact(tmp_path):
    storage = StreamStorage(str(tmp_path / "many"), StreamNumpyFormat({"tokens": np.uint16}))
    with storage.writer(shard_size=1) as w:
        for i in range(2000):
            w.append({"tokens": [i % 60_000]})
    size = len(storage.manifest.to_json())
    assert storage.manifest.num_shards == 2000
    files = len(storage.manifest.shard_table.files)  # tokens and record starts
    assert files == 2
    # About 40 bytes a shard and file (a size and a checksum): columns, no repeated keys or paths.
    assert size < 2000 * 40 * files
