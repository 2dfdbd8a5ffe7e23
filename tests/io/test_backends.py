"""The store registry (`guideloom.io.backends`): every registered backend keeps the backend
contract, and a store added as one module (http(s)://, read-only) works end to end: a dataset
served by a static HTTP server on 127.0.0.1 is read through `StatefulDataLoader.from_storage`,
and a write to it is refused with a message that says what to do instead."""

from __future__ import annotations

import http.server
import inspect
import os
import re
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from guideloom import StatefulDataLoader, StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import StorageAccessError
from guideloom.io import Location
from guideloom.io.backends import BACKENDS, DEFAULT_BACKEND, Backend, backend_for
from guideloom.io.shards import LocalShardReader, RemoteShardReader, open_shard_reader

pytest.importorskip("aiohttp")  # fsspec's HTTPFileSystem runs on aiohttp


def test_every_backend_keeps_the_contract() -> None:
    """Each registered backend is a `Backend`, claims protocols no other claims, overrides only
    methods `Backend` declares (with the same parameters), and says how it is named and
    installed; the registry finds it by each of its protocols."""
    seen: dict[str, Backend] = {}
    declared = {n: inspect.signature(f) for n, f in vars(Backend).items() if inspect.isfunction(f)}
    for backend in BACKENDS:
        assert isinstance(backend, Backend), backend
        assert backend.protocols, f"{backend!r} serves no protocol"
        for protocol in backend.protocols:
            assert protocol not in seen, f"{protocol} is claimed by {seen[protocol]!r} and {backend!r}"
            assert protocol == protocol.lower() and "://" not in protocol
            seen[protocol] = backend
            assert backend_for(f"{protocol}://x/y") is backend
        for name, member in vars(type(backend)).items():
            if inspect.isfunction(member) and not name.startswith("_"):
                assert name in declared, f"{type(backend).__name__}.{name} is not in the Backend interface"
                assert inspect.signature(member).parameters.keys() == declared[name].parameters.keys(), name
        if backend.key is not None:  # a remote store: its messages have every text they use
            for text in ("generic_hint", "endpoint_options", "throttle_spread"):
                assert isinstance(getattr(backend, text), str), (backend, text)
            assert backend.extra is not None, f"{backend!r}: which extra installs it?"
        if backend.list_prices is not None:
            assert set(backend.list_prices) == {"get_per_1000", "egress_per_gb"}, backend
            assert all(v >= 0 for v in backend.list_prices.values()), backend
        assert backend.is_local == (backend.endpoint(None, f"{backend.protocols[0]}://h/x", {}) is None)
    assert backend_for("/a/local/path").is_local and backend_for("file:///x").is_local
    assert backend_for("ftp://host/x") is DEFAULT_BACKEND


def test_local_and_remote_is_decided_by_the_backend(tmp_path: Path) -> None:
    """`open_shard_reader` picks the reader from the location's backend: positioned reads (and
    the descriptor fast path) on local disk, range requests elsewhere."""
    fmt = StreamNumpyFormat({"tokens": np.uint16})
    for url, kind in ((str(tmp_path / "ds"), LocalShardReader), ("memory://backends-ds", RemoteShardReader)):
        storage = StreamStorage(url, fmt)
        with storage.writer() as w:
            w.append({"tokens": np.arange(10, dtype=np.uint16)})
        storage = StreamStorage(url, fmt)
        reader = open_shard_reader(storage.location, storage.manifest.shard_table)
        assert isinstance(reader, kind) and reader.local == storage.location.backend.is_local
        mapped = reader.map_file(0, "data")
        assert (mapped is not None) == reader.local
        if mapped is not None:
            assert bytes(mapped) == reader.read([(0, "data", 0, len(mapped))])[0]
        reader.close()


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that answers ``Range: bytes=a-b`` (206) as object stores and CDNs
    do; python's own handler sends whole files only."""

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def send_head(self):  # type: ignore[no-untyped-def]
        wanted = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not wanted or not os.path.isfile(path):
            return super().send_head()
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
        size = os.path.getsize(path)
        if match is None or int(match.group(1)) >= size:
            self.send_error(416)
            return None
        start = int(match.group(1))
        stop = min(int(match.group(2)) + 1, size) if match.group(2) else size
        f = open(path, "rb")  # noqa: SIM115 (closed by copyfile's caller)
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._remaining = stop - start
        return _Limited(f, stop - start)


class _Limited:
    """A file object that ends after ``n`` bytes (the range's end)."""

    def __init__(self, f, n: int) -> None:  # type: ignore[no-untyped-def]
        self.f, self.n = f, n

    def read(self, size: int = -1) -> bytes:
        size = self.n if size < 0 else min(size, self.n)
        data = self.f.read(size)
        self.n -= len(data)
        return data

    def close(self) -> None:
        self.f.close()


@pytest.fixture(scope="module")
def http_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(folder served, its URL) from a static HTTP server with Range support on 127.0.0.1."""
    root = tmp_path_factory.mktemp("served")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_RangeHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_dataset_reads_through_the_loader(http_root: tuple[Path, str]) -> None:
    root, base = http_root
    fmt = StreamNumpyFormat({"tokens": np.uint32})
    tokens = np.arange(1000, dtype=np.uint32)
    local = StreamStorage(str(root / "ds"), fmt)
    with local.writer() as w:
        for piece in np.array_split(tokens, 7):
            w.append({"tokens": piece})

    storage = StreamStorage(f"{base}/ds", fmt)
    assert type(storage.location.backend).__name__ == "HTTPBackend" and not storage.location.is_local
    windows = StreamDataset(storage, sequence_length=16)
    assert len(windows) == 1000 // 16
    assert windows[3]["tokens"].tolist() == list(range(48, 64))
    loader = StatefulDataLoader.from_storage(storage, sequence_length=16, batch_size=8, shuffle=True, seed=1)
    seen = np.concatenate([b["tokens"].reshape(-1).numpy() for b in loader])
    assert sorted(seen.tolist()) == list(range(len(windows) * 16))


def test_http_is_read_only(http_root: tuple[Path, str]) -> None:
    _, base = http_root
    fmt = StreamNumpyFormat({"tokens": np.uint32})
    with pytest.raises(
        StorageAccessError, match=r"http\(s\):// datasets are read-only .* local path or an object store"
    ):
        with StreamStorage(f"{base}/new", fmt).writer() as w:
            w.append({"tokens": np.arange(3, dtype=np.uint32)})
    location = Location(f"{base}/new")
    for attempt in (
        lambda: location.write("x", b"1"),
        lambda: location.create("x", b"1"),
        lambda: location.delete("x"),
    ):
        with pytest.raises(StorageAccessError, match=f"{re.escape(base)}/new/x"):
            attempt()
