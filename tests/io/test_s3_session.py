"""DataLoader workers inherit botocore's parsed S3 models from the training process."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.io import location, s3

pytestmark = pytest.mark.s3

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _in_child(queue) -> None:
    session = s3._s3_session()
    loader = session.get_component("data_loader")
    queue.put((loader is s3._BOTOCORE_LOADER, len(getattr(loader, "_cache", {}))))


def test_a_forked_worker_reuses_the_parents_parsed_models(s3_bucket, s3_options):
    storage = StreamStorage(f"s3://{s3_bucket}/ds", FMT, storage_options=s3_options)
    with storage.writer() as w:
        w.append({"tokens": np.arange(256)})
    ds = StreamDataset(StreamStorage(storage.url, FMT, storage_options=s3_options), 64)
    assert ds[1]["tokens"][0] == 64  # the parent has made requests: its loader holds the models
    parent = s3._BOTOCORE_LOADER
    assert parent is not None and len(parent._cache) > 0
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(queue,))
    child.start()
    shared, cached = queue.get(timeout=60)
    child.join(60)
    assert shared and cached == len(parent._cache)


def test_a_profile_or_a_session_of_the_user_is_left_alone(s3_bucket, s3_options):
    given = location.Location(f"s3://{s3_bucket}/x", {**s3_options, "profile": "other"})._fs_options()
    assert "session" not in given and given["profile"] == "other"
    ours = location.Location(f"s3://{s3_bucket}/x", s3_options)._fs_options()
    assert ours["session"] is s3._s3_session()
