"""The same promises on S3, GCS and Azure Blob: exact epochs in every shuffle mode, resume into
other worker counts, `verify` and `inspect`, a shard that grew or shrank caught on read.

Each test runs once per store through the `object_store` fixture (tests/conftest.py): S3 on the
session's endpoint, GCS on gcp-storage-emulator, Azure on azurite, all on 127.0.0.1. Every remote
epoch is compared with the same loader over a local-disk copy of the dataset.
"""

from __future__ import annotations

import json
from typing import Any

import fsspec
import numpy as np
import pytest
from typer.testing import CliRunner

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.cli import app
from guideloom.errors import ShardCorruptError
from guideloom.testing import assert_exact_resume

WINDOW = 32
WINDOWS = 192
FORMAT = StreamNumpyFormat({"tokens": np.uint16})


def _write(url: str, options: dict[str, Any] | None) -> StreamStorage:
    storage = StreamStorage(url, FORMAT, storage_options=options)
    tokens = (np.arange(WINDOWS * WINDOW, dtype=np.uint64) * 7 % 65_521).astype(np.uint16)
    with storage.writer(shard_size=WINDOWS * WINDOW * 2 // 3 + 100) as w:
        for piece in np.array_split(tokens, 5):  # records that do not line up with windows
            w.append({"tokens": piece})
    return storage


def _firsts(loader: Any) -> list[list[int]]:
    return [b["tokens"][:, 0].tolist() for b in loader]


@pytest.fixture
def remote(object_store: tuple[str, dict[str, Any]], tmp_path: Any) -> tuple[StreamStorage, StreamStorage]:
    root, options = object_store
    stored = _write(f"{root}/ds", options)
    assert len(stored.manifest.shards) == 3
    return StreamStorage(f"{root}/ds", FORMAT, storage_options=options), _write(str(tmp_path / "local"), None)


SHUFFLES: list[dict[str, Any]] = [
    {"shuffle": False},
    {"shuffle": "block", "shuffle_block_size": 16, "shuffle_buffer_blocks": 2, "shuffle_run_size": 4},
    {"shuffle": "full"},
]


def test_every_shuffle_mode_gives_the_local_epoch_exactly(remote):
    storage, local = remote
    for settings in SHUFFLES:
        for workers in (0, 2):
            kwargs = dict(sequence_length=WINDOW, batch_size=8, seed=3, num_workers=workers, **settings)
            got = _firsts(StatefulDataLoader.from_storage(storage, **kwargs))
            assert got == _firsts(StatefulDataLoader.from_storage(local, **kwargs)), (settings, workers)
            assert sorted(sum(got, [])) == sorted(t * WINDOW * 7 % 65_521 for t in range(WINDOWS))


def test_resume_into_other_worker_counts(remote):
    storage, _ = remote

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            storage,
            sequence_length=WINDOW,
            batch_size=8,
            shuffle="block",
            shuffle_block_size=16,
            seed=5,
            **kwargs,
        )

    assert_exact_resume(make_loader, worker_counts=(0, 2), world_sizes=(1,), elastic=())


def _cli_options(options: dict[str, Any]) -> list[str]:
    """`-o KEY=VALUE` flags for the options (nested ones as JSON)."""
    flags = []
    for key, value in options.items():
        shown = json.dumps(value) if isinstance(value, dict) else str(value)
        flags += ["-o", f"{key}={shown}"]
    return flags


def test_verify_and_inspect(remote, object_store):
    storage, _ = remote
    _, options = object_store
    runner = CliRunner()
    result = runner.invoke(app, ["verify", storage.url, *_cli_options(options)])
    assert result.exit_code == 0, result.output
    assert f"ok: 3 shards of {storage.url}, sizes and checksums match the manifest" in result.output
    result = runner.invoke(app, ["inspect", storage.url, "--json", *_cli_options(options)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["shards"] == 3 and summary["tokens"] == WINDOWS * WINDOW
    # A damaged shard is named by verify, on every store.
    fs, root = fsspec.core.url_to_fs(storage.url, **options)
    path = storage.manifest.shard_table.path(1, "data")
    body = fs.cat_file(f"{root}/{path}")
    fs.pipe_file(f"{root}/{path}", body[:-4] + bytes(4 - i for i in range(4)))
    result = runner.invoke(app, ["verify", storage.url, *_cli_options(options)])
    assert result.exit_code == 1 and path in result.output


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_a_shard_that_grew_or_shrank_is_caught_when_read(remote, object_store, change):
    storage, _ = remote
    _, options = object_store
    fs, root = fsspec.core.url_to_fs(storage.url, **options)
    path = storage.manifest.shard_table.path(1, "data")
    body = fs.cat_file(f"{root}/{path}")
    fs.pipe_file(f"{root}/{path}", body + b"\0\0\0\0" if change == "grow" else body[:-2])
    ds = StreamDataset(StreamStorage(storage.url, FORMAT, storage_options=options), WINDOW)
    first_of_shard_1 = int(storage.manifest.shard_table.tokens[0]) // WINDOW + 1
    with pytest.raises(ShardCorruptError) as info:
        ds.read_windows(list(range(first_of_shard_1, first_of_shard_1 + 2)))
    message = str(info.value)
    assert path in message and f"records {len(body)}" in message


def test_a_batch_costs_the_same_merged_requests_on_every_store(object_store, request):
    """One batch of block-shuffled windows is one round of merged range GETs, the same number
    and the same bytes on S3, GCS and Azure (counted at a proxy in front of each store)."""
    from s3proxy import CountingProxy

    root, options = object_store
    store = root.split("://", 1)[0]
    endpoint = request.getfixturevalue(
        {"s3": "s3_endpoint", "gs": "gcs_endpoint", "az": "azure_endpoint"}[store]
    )
    _write(f"{root}/ds", options)
    with CountingProxy(endpoint.url) as proxy:
        through = {**endpoint.storage_options(proxy.url), "skip_instance_cache": True}
        if store == "s3":
            through = {**through, "key": options["key"], "secret": options["secret"]}
        ds = StreamDataset(StreamStorage(f"{root}/ds", FORMAT, storage_options=through), WINDOW)
        proxy.reset()
        # Three runs of eight windows, apart: three merged requests, whatever the store.
        batch = ds.read_windows([*range(8), *range(40, 48), *range(130, 138)])
        gets = [e for e in proxy.log if e.method == "GET" and 200 <= e.status < 300]
    assert batch["tokens"].shape == (24, WINDOW)
    assert len(gets) == 3, [(e.path, e.range) for e in gets]
    assert sum(e.bytes for e in gets) == 24 * WINDOW * 2


@pytest.mark.parametrize("action", ["short", "truncate", "reset", "status"])
def test_one_bad_answer_on_the_manifest_or_a_shard_is_retried_through_on_every_store(
    object_store, request, action
):
    """The fault proxy in front of each store (item 4 of issue 23 on GCS and Azure too): one
    short, truncated or reset body, or one 503, on the manifest's GET and on a shard's GET is
    retried through, and the windows are exact."""
    from faultproxy import Fault, FaultProxy

    root, options = object_store
    store = root.split("://", 1)[0]
    endpoint = request.getfixturevalue(
        {"s3": "s3_endpoint", "gs": "gcs_endpoint", "az": "azure_endpoint"}[store]
    )
    stored = _write(f"{root}/ds", options)
    want = StreamDataset(stored, WINDOW).read_windows(range(WINDOWS))["tokens"]
    shard = stored.manifest.shard_table.path(1, "data").rsplit("/", 1)[-1]
    with FaultProxy(endpoint.url) as proxy:
        through = {
            **endpoint.storage_options(proxy.url),
            "skip_instance_cache": True,
            "guideloom_deadline_s": 20,
        }
        if store == "s3":
            through = {**through, "key": options["key"], "secret": options["secret"]}
        manifest_rule = proxy.add(Fault(action, r"manifest\.json", method="GET", status=503, times=1))
        shard_rule = proxy.add(Fault(action, shard.replace(".", r"\."), method="GET", status=503, times=1))
        ds = StreamDataset(StreamStorage(f"{root}/ds", FORMAT, storage_options=through), WINDOW)
        got = ds.read_windows(range(WINDOWS))["tokens"]
    assert manifest_rule.fired == 1 and shard_rule.fired == 1, (manifest_rule.fired, shard_rule.fired)
    np.testing.assert_array_equal(got, want)


@pytest.mark.azure
def test_azure_answers_busy_twice_and_the_read_still_fits_in_a_short_deadline(azure_endpoint, az_container):
    """The Azure SDK's own retry would wait 15-21 s before each retry, so two 503 answers to one
    GET would pass a 20 s deadline on their own; GuideLoom shortens those waits
    (`stores.AZURE_BACKOFF`), and the open and the read complete within it."""
    from faultproxy import Fault, FaultProxy

    from guideloom.io.location import Location
    from guideloom.io.stores import AZURE_BACKOFF

    root = f"az://{az_container}"
    stored = _write(f"{root}/ds", azure_endpoint.storage_options())
    want = StreamDataset(stored, WINDOW).read_windows(range(WINDOWS))["tokens"]
    with FaultProxy(azure_endpoint.url) as proxy:
        through = {**azure_endpoint.storage_options(proxy.url), "skip_instance_cache": True}
        policy = Location(
            f"{root}/ds", {**through, "guideloom_deadline_s": 20}
        ).fs.service_client._config.retry_policy
        assert {name: getattr(policy, name) for name in AZURE_BACKOFF} == AZURE_BACKOFF
        waits = [policy.get_backoff_time({"count": n}) for n in (1, 2, 3)]
        assert sum(waits) < 10, waits  # the SDK's defaults: 45-63 s for its three retries
        rule = proxy.add(Fault("status", r"manifest\.json", method="GET", status=503, times=2))
        ds = StreamDataset(
            StreamStorage(f"{root}/ds", FORMAT, storage_options={**through, "guideloom_deadline_s": 20}),
            WINDOW,
        )
        got = ds.read_windows(range(WINDOWS))["tokens"]
    assert rule.fired == 2
    np.testing.assert_array_equal(got, want)
