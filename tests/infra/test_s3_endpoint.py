"""The test infrastructure itself: the S3 endpoint, the counting proxy and the dataset_url fixture.

If these fail, every S3 test's result is meaningless; they run first when a run is in doubt:
`pytest tests/infra`.
"""

from __future__ import annotations

import os
from typing import Any

import fsspec
import pytest
import s3fs


def _fs(options: dict[str, Any]) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**options)


@pytest.mark.s3
def test_put_get_round_trip(s3_options: dict[str, Any], s3_bucket: str) -> None:
    fs = _fs(s3_options)
    data = bytes(range(256)) * 40
    fs.pipe_file(f"{s3_bucket}/a/b.bin", data)
    assert fs.cat_file(f"{s3_bucket}/a/b.bin") == data
    assert fs.info(f"{s3_bucket}/a/b.bin")["size"] == len(data)
    assert fs.ls(f"{s3_bucket}/a", detail=False) == [f"{s3_bucket}/a/b.bin"]


@pytest.mark.s3
def test_range_read_takes_keyword_offsets(s3_options: dict[str, Any], s3_bucket: str) -> None:
    fs = _fs(s3_options)
    data = bytes(range(256)) * 4
    path = f"{s3_bucket}/ranges.bin"
    fs.pipe_file(path, data)
    # start=/end= by keyword: positionally the second argument of s3fs's cat_file is a version id.
    assert fs.cat_file(path, start=10, end=20) == data[10:20]
    assert fs.cat_file(path, start=1000, end=5000) == data[1000:]  # past EOF is clipped
    assert fs.cat_file(path, start=-24) == data[-24:]  # suffix range
    assert fs.cat_ranges([path, path], [0, 512], [3, 515]) == [data[0:3], data[512:515]]


@pytest.mark.s3
def test_multipart_upload_round_trip(s3_options: dict[str, Any], s3_bucket: str) -> None:
    fs = _fs(s3_options)
    part = 5 * 2**20  # S3's minimum part size
    data = os.urandom(part) + os.urandom(part) + b"tail"
    path = f"{s3_bucket}/multipart.bin"
    with fs.open(path, "wb", block_size=part) as f:
        f.write(data)
    assert fs.info(path)["size"] == len(data)
    assert fs.cat_file(path, start=part - 2, end=part + 2) == data[part - 2 : part + 2]


@pytest.mark.s3
def test_counting_proxy_counts_one_range_get(
    counting_s3: Any, s3_options: dict[str, Any], s3_bucket: str
) -> None:
    data = os.urandom(4 * 2**20)
    path = f"{s3_bucket}/shard.bin"
    _fs(s3_options).pipe_file(path, data)

    fs = _fs(counting_s3.storage_options)
    counting_s3.reset()
    assert fs.cat_file(path, start=1_000_000, end=1_065_536) == data[1_000_000:1_065_536]

    assert counting_s3.requests["GET"] == 1
    assert counting_s3.request_count == 1
    assert counting_s3.bytes_out == 65_536
    (entry,) = counting_s3.log
    assert (entry.method, entry.status, entry.bytes) == ("GET", 206, 65_536)
    assert entry.path.startswith(f"/{s3_bucket}/shard.bin")
    assert entry.range == "bytes=1000000-1065535"

    counting_s3.reset()
    assert (counting_s3.request_count, counting_s3.bytes_out, counting_s3.log) == (0, 0, [])


@pytest.mark.s3
def test_counting_proxy_forwards_signed_writes(
    counting_s3: Any, s3_options: dict[str, Any], s3_bucket: str
) -> None:
    """PUT, HEAD, LIST and DELETE pass through unchanged (RGW checks each request's signature)."""
    fs = _fs(counting_s3.storage_options)
    fs.pipe_file(f"{s3_bucket}/via-proxy", b"hello")
    assert fs.info(f"{s3_bucket}/via-proxy")["size"] == 5
    assert fs.ls(s3_bucket, detail=False, refresh=True) == [f"{s3_bucket}/via-proxy"]
    assert _fs(s3_options).cat_file(f"{s3_bucket}/via-proxy") == b"hello"
    fs.rm(f"{s3_bucket}/via-proxy")
    assert not _fs(s3_options).exists(f"{s3_bucket}/via-proxy")
    assert counting_s3.requests["PUT"] == 1


@pytest.mark.s3
def test_wrong_secret_is_refused(s3_endpoint: Any, s3_options: dict[str, Any], s3_bucket: str) -> None:
    if s3_endpoint.backend != "rgw":
        pytest.skip(f"only RGW is known to check signatures; this run uses {s3_endpoint.backend}")
    bad = {**s3_options, "secret": "not-the-secret", "skip_instance_cache": True}
    with pytest.raises(PermissionError):
        _fs(bad).cat_file(f"{s3_bucket}/anything")


@pytest.mark.parametrize("round", [1, 2])  # the second round proves the location is fresh again
def test_dataset_url_is_empty_and_writable(dataset_url: tuple[str, dict[str, Any]], round: int) -> None:
    url, options = dataset_url
    fs, root = fsspec.core.url_to_fs(url, **options)
    assert not fs.exists(root)
    assert not fs.exists(f"{root}/probe.bin")
    fs.makedirs(root, exist_ok=True)  # local files need the directory; object stores ignore it
    fs.pipe_file(f"{root}/probe.bin", b"round %d" % round)
    fs.invalidate_cache()
    assert fs.cat_file(f"{root}/probe.bin") == b"round %d" % round
    assert fs.ls(root, detail=False) == [f"{root}/probe.bin"]


def test_memory_dataset_url_is_cleared_afterwards() -> None:
    fs = fsspec.filesystem("memory")
    leftovers = [k for k in fs.store if k.startswith("/gl-test-")]
    assert leftovers == []


@pytest.mark.s3
@pytest.mark.ray
def test_ray_workers_reach_the_endpoint(ray_local: Any, s3_options: dict[str, Any], s3_bucket: str) -> None:
    import ray

    _fs(s3_options).pipe_file(f"{s3_bucket}/from-driver", b"payload")

    @ray.remote
    def read_in_worker(path: str) -> bytes:
        options = {
            "key": os.environ["AWS_ACCESS_KEY_ID"],
            "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": os.environ["GUIDELOOM_TEST_S3_ENDPOINT"]},
        }
        return s3fs.S3FileSystem(**options).cat_file(path)

    assert ray.get(read_in_worker.remote(f"{s3_bucket}/from-driver")) == b"payload"
