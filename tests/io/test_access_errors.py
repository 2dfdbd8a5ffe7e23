"""Unknown protocols, missing buckets and wrong credentials fail clearly and leak no secret."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import GuideLoomError, StorageAccessError, UnknownProtocolError
from guideloom.io import redact_url

FMT = StreamNumpyFormat({"tokens": np.uint16})


def test_unknown_protocol():
    with pytest.raises(UnknownProtocolError, match=r"nosuch://bucket/x: unknown protocol"):
        StreamStorage("nosuch://bucket/x", FMT)


def test_redact_url_drops_credentials():
    assert redact_url("s3://AKIA:supersecret@bucket/x?token=abc") == "s3://bucket/x"
    assert redact_url("/local/path") == "/local/path"


@pytest.mark.s3
def test_missing_bucket_for_reading_and_writing(s3_options):
    storage = StreamStorage("s3://gl-no-such-bucket-xyz/ds", FMT, storage_options=s3_options)
    assert not storage.exists()
    with pytest.raises(FileNotFoundError, match="no dataset at s3://gl-no-such-bucket-xyz/ds"):
        StreamDataset(storage, 4)
    with pytest.raises((GuideLoomError, OSError)) as info:
        with storage.writer() as w:
            w.append({"tokens": [1, 2, 3]})
    assert "gl-no-such-bucket-xyz" in str(info.value)
    assert "create the bucket first" in str(info.value)


@pytest.mark.s3
def test_wrong_credentials_never_show_the_secret(s3_endpoint, s3_bucket, s3_options):
    if s3_endpoint.backend == "moto":
        pytest.skip("moto's server does not check signatures; RGW and MinIO do")
    secret = "this-is-the-wrong-secret-1234"
    bad = {**s3_options, "secret": secret, "skip_instance_cache": True}
    with pytest.raises(StorageAccessError) as info:
        StreamStorage(f"s3://{s3_bucket}/ds", FMT, storage_options=bad)
    message = str(info.value)
    assert "credentials" in message and f"s3://{s3_bucket}/ds" in message
    assert secret not in message and s3_options["secret"] not in message
    chained = info.value.__cause__
    while chained is not None:
        assert secret not in str(chained)
        chained = chained.__cause__


def test_unreachable_endpoint_names_it():
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        "skip_instance_cache": True,
    }
    with pytest.raises(
        StorageAccessError, match=r"could not connect to the storage endpoint http://127.0.0.1:9"
    ):
        StreamStorage("s3://some-bucket/ds", FMT, storage_options=options)
