"""A training job needs only read access (issue 23 item 7), tested against Ceph RGW, which
enforces bucket policies: a second user gets a policy that allows only what a reader needs, and
a write with its credentials fails naming the action, the file and the store's code.

What a reader needs on S3, and why (docs/remote-buckets.md gives the policy):
- ``s3:GetObject`` on the dataset's prefix: the snapshot record, the shard table, every read;
- ``s3:ListBucket`` on the bucket (prefix-limited): opening checks that no newer snapshot record
  exists than ``manifest.json`` names, and without ListBucket S3 answers a missing object with
  403 instead of 404.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.errors import StorageAccessError

pytestmark = pytest.mark.s3

FMT = StreamNumpyFormat({"tokens": np.uint16})
REPO = Path(__file__).resolve().parents[2]


def documented_policy() -> dict:
    """The reader's bucket policy as docs/remote-buckets.md prints it (user `reader`, bucket
    `corpus`, dataset `corpus/web`)."""
    text = (REPO / "docs" / "remote-buckets.md").read_text()
    section = text.split("## Least privilege", 1)[1]
    return json.loads(section.split("```json", 1)[1].split("```", 1)[0])


def _reader(s3_endpoint, s3_bucket, s3_options, statements=None):
    """Options of a new user under ``statements`` (default: the documented reader's policy),
    with `reader`, `corpus` and `web` replaced by the user, the bucket and the dataset `ds`."""
    if s3_endpoint.backend != "rgw":
        pytest.skip("needs an S3 store that enforces bucket policies (Ceph RGW: install radosgw)")
    import s3fs

    uid = f"reader-{uuid.uuid4().hex[:8]}"
    key, secret = f"{uid}-key", f"{uid}-secret-000000000000000000000000"
    s3_endpoint.add_user(uid, key, secret)
    document = (
        documented_policy() if statements is None else {"Version": "2012-10-17", "Statement": statements}
    )
    policy = (
        json.dumps(document).replace("user/reader", f"user/{uid}").replace(":::corpus", f":::{s3_bucket}")
    )
    policy = policy.replace('"web/*"', '"ds/*"').replace("/web/*", "/ds/*")
    owner = s3fs.S3FileSystem(**s3_options, skip_instance_cache=True)
    owner.call_s3("put_bucket_policy", Bucket=s3_bucket, Policy=policy)
    return {
        "key": key,
        "secret": secret,
        "client_kwargs": s3_options["client_kwargs"],
        "skip_instance_cache": True,
    }


def _dataset(url, options):
    storage = StreamStorage(url, FMT, storage_options=options)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=2000) as w:
        for n in rng.integers(50, 400, 60):
            w.append({"tokens": rng.integers(0, 60000, n).astype(np.uint16)})
    return storage


def _batches(loader, n=None):
    out = []
    for batch in loader:
        out.append(batch["tokens"].clone())
        if n is not None and len(out) == n:
            break
    return out


def test_the_documented_reader_policy_trains_and_resumes(s3_endpoint, s3_bucket, s3_options):
    url = f"s3://{s3_bucket}/ds"
    _dataset(url, s3_options)
    reader = _reader(s3_endpoint, s3_bucket, s3_options)
    kwargs = dict(sequence_length=64, batch_size=4, shuffle=True, seed=3)
    full = _batches(
        StatefulDataLoader.from_storage(StreamStorage(url, FMT, storage_options=reader), **kwargs)
    )
    loader = StatefulDataLoader.from_storage(StreamStorage(url, FMT, storage_options=reader), **kwargs)
    head = _batches(loader, 5)
    state = loader.state_dict()
    resumed = StatefulDataLoader.from_storage(StreamStorage(url, FMT, storage_options=reader), **kwargs)
    resumed.load_state_dict(state)
    rest = _batches(resumed)
    assert len(full) > 10 and len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full):
        assert bool((got == want).all())


def test_a_reader_cannot_write_and_is_told_so(s3_endpoint, s3_bucket, s3_options):
    url = f"s3://{s3_bucket}/ds"
    _dataset(url, s3_options)
    reader = _reader(s3_endpoint, s3_bucket, s3_options)
    storage = StreamStorage(url, FMT, storage_options=reader)
    with pytest.raises(StorageAccessError) as info:
        with storage.writer(append=True) as w:
            w.append({"tokens": np.arange(10, dtype=np.uint16)})
    message = str(info.value)
    assert f"{url}/" in message and "AccessDenied" in message
    assert "policy" in message  # the fix: the user's or the bucket's policy for this action
    assert "writing" in message or "creating" in message  # the action
    # Nothing committed was touched: the owner still reads the same dataset.
    assert StreamStorage(url, FMT, storage_options=s3_options).manifest.total_records == 60


@pytest.mark.parametrize("listing", ["none", "prefix-limited"])
def test_a_reader_without_list_gets_a_named_error(s3_endpoint, s3_bucket, s3_options, listing):
    """No s3:ListBucket, or one limited by an s3:prefix condition (docs/remote-buckets.md says
    why that is not enough): the error names the object, the cause and the fix."""
    url = f"s3://{s3_bucket}/ds"
    _dataset(url, s3_options)
    statements = documented_policy()["Statement"]
    if listing == "none":
        statements = [st for st in statements if st["Action"] == ["s3:GetObject"]]
    else:
        for st in statements:
            if st["Action"] == ["s3:ListBucket"]:
                st["Condition"] = {"StringLike": {"s3:prefix": ["web/*"]}}
    reader = _reader(s3_endpoint, s3_bucket, s3_options, statements)
    with pytest.raises(StorageAccessError) as info:
        StreamStorage(url, FMT, storage_options=reader)
    message = str(info.value)
    assert f"checking {url}/snapshots/log/" in message  # what was asked, of which object
    assert "may not list the bucket" in message and "allow s3:ListBucket" in message  # cause, fix


def test_a_reader_cannot_commit_roll_back_or_ingest_and_is_told_so(
    s3_endpoint, s3_bucket, s3_options, tmp_path, ray_local
):
    """The reader's policy refuses every change: a rollback (a commit of an older snapshot), an
    expiry and an ingestion into the dataset each fail naming AccessDenied, the key and the policy,
    and the owner's dataset stays as it was."""
    from guideloom.errors import IngestError

    url = f"s3://{s3_bucket}/ds"
    owner = _dataset(url, s3_options)
    first = StreamStorage(url, FMT, storage_options=s3_options).current_snapshot.id
    with owner.writer(append=True) as w:
        w.append({"tokens": np.arange(10, dtype=np.uint16)})
    reader = _reader(s3_endpoint, s3_bucket, s3_options)
    storage = StreamStorage(url, FMT, storage_options=reader)
    for change in (lambda: storage.rollback(first), lambda: storage.expire(keep_last=1, grace=0)):
        with pytest.raises((StorageAccessError, IngestError)) as info:
            change()
        message = str(info.value)
        assert f"{url}/" in message and "AccessDenied" in message and "policy" in message, message

    from guideloom.workers.ingest import run_ingest

    text = tmp_path / "in.jsonl"
    text.write_text("".join(f'{{"text": "line {i}"}}\n' for i in range(20)))
    with pytest.raises((StorageAccessError, IngestError)) as info:
        run_ingest(
            {
                "inputs": [str(text)],
                "output": url,
                "append": True,
                "tokenizer": "bytes",
                "storage_options": reader,
                "progress": "none",
            }
        )
    message = str(info.value)
    assert "AccessDenied" in message and url in message, message
    after = StreamStorage(url, FMT, storage_options=s3_options)
    assert after.current_snapshot.id != first and after.manifest.total_records == 61
