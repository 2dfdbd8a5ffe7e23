"""One peer system, driven by ``benchmarks/peers.py`` over a pipe: ingest the corpus, time passes.

Run with the peer's own interpreter, isolated (``python -I benchmarks/peers_worker.py SYSTEM``),
so that only that environment's packages are importable: ``guideloom`` here is the other project
(Guide Labs' GuideLoom 1.1) in its venv, or this repository's in the driver's. The module imports
nothing outside the standard library at its top, so it loads under any of the interpreters.

Protocol: one JSON object per line on stdin, one JSON reply per line on the original stdout
(libraries' own prints go to stderr). Commands:

- ``{"op": "versions"}``: the interpreter and the packages that matter.
- ``{"op": "ingest", "name": ..., "corpus": dir, "target": path or s3 url, "shard_bytes": n,
  "s3": {...} or null, "reader": "mmap"}``: write the corpus the system's own way (untimed by
  the driver's table); ``reader`` picks GuideLoom 1.1's byte-range reader.
- ``{"op": "pass", "name": ..., "shuffle": false | true | "block" | {Shuffle settings},
  "workers": n, "parallel": "process" | "thread", "batch_size": 8, "sequence_length": 2048,
  "seed": 0, "endpoint_url": optional, "report": optional}``: one epoch; the reply has
  ``first_batch_s``, ``first_tokens``, ``tokens`` (after the first batch) and ``seconds`` (from
  the first batch to the last). ``endpoint_url`` sends this pass to another S3 endpoint (the
  counting proxy); ``report`` adds GuideLoom's ``shuffle_report`` prediction (``predicted``).
- ``{"op": "quit"}``.

A failure answers ``{"error": "...", "traceback": "..."}`` and the worker goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

SYSTEMS = ("guideloom", "guideloom11", "litdata", "mosaic")


def _corpus(corpus: str) -> tuple[Any, Any]:
    """The raw corpus the driver wrote: every token (uint16) and the documents' lengths."""
    import numpy as np

    tokens = np.load(os.path.join(corpus, "tokens.npy"), mmap_mode="r")
    lengths = np.load(os.path.join(corpus, "lengths.npy"))
    return tokens, lengths


def _documents(corpus: str) -> Any:
    import numpy as np

    tokens, lengths = _corpus(corpus)
    ends = np.cumsum(lengths)
    start = 0
    for end in ends.tolist():
        yield np.ascontiguousarray(tokens[start:end])
        start = end


def _numel(batch: Any) -> int:
    if isinstance(batch, dict):
        batch = batch["tokens"]
    return int(batch.numel())


def timed_epoch(loader: Any) -> dict[str, Any]:
    """One epoch: time to the first batch, then tokens and seconds from it to the last."""
    t0 = time.perf_counter()
    it = iter(loader)
    try:
        first = next(it)
        t1 = time.perf_counter()
        tokens = 0
        for batch in it:
            tokens += _numel(batch)
        t2 = time.perf_counter()
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        del it
    return {"first_batch_s": t1 - t0, "first_tokens": _numel(first), "tokens": tokens, "seconds": t2 - t1}


class GuideLoomPeer:
    """This repository's GuideLoom (``StreamStorage`` writer, ``StatefulDataLoader.from_storage``)."""

    packages = ("guideloom", "torch", "torchdata", "numpy")

    def __init__(self) -> None:
        self.storages: dict[str, Any] = {}
        self.targets: dict[str, Any] = {}

    def _storage(self, target: str, s3: dict[str, Any] | None, endpoint_url: str | None = None) -> Any:
        import numpy as np

        from guideloom import StreamNumpyFormat, StreamStorage

        options = None
        if s3:
            options = {
                "key": s3["key"],
                "secret": s3["secret"],
                "client_kwargs": {"endpoint_url": endpoint_url or s3["endpoint_url"]},
            }
            if endpoint_url:  # another endpoint (the counting proxy): its own filesystem
                options["skip_instance_cache"] = True
        return StreamStorage(target, StreamNumpyFormat({"tokens": np.uint16}), storage_options=options)

    def ingest(self, cmd: dict[str, Any]) -> dict[str, Any]:
        storage = self._storage(cmd["target"], cmd.get("s3"))
        with storage.writer(overwrite=True, shard_size=int(cmd["shard_bytes"])) as writer:
            for doc in _documents(cmd["corpus"]):
                writer.append({"tokens": doc})
        storage = self._storage(cmd["target"], cmd.get("s3"))
        self.storages[cmd["name"]] = storage
        self.targets[cmd["name"]] = (cmd["target"], cmd.get("s3"))
        return {"shards": len(storage.manifest.shards), "tokens": int(storage.manifest.total_tokens)}

    @staticmethod
    def _shuffle(cmd: dict[str, Any]) -> Any:
        """``shuffle``: False, True, "block", or ``{"mode": ..., "block_bytes": ...}`` (a `Shuffle`)."""
        from guideloom import Shuffle

        shuffle = cmd["shuffle"]
        return Shuffle(**shuffle) if isinstance(shuffle, dict) else shuffle

    def _pass_storage(self, cmd: dict[str, Any]) -> Any:
        if cmd.get("endpoint_url"):  # this pass through another endpoint (the counting proxy)
            target, s3 = self.targets[cmd["name"]]
            return self._storage(target, s3, cmd["endpoint_url"])
        return self.storages[cmd["name"]]

    def loader(self, cmd: dict[str, Any]) -> Any:
        from guideloom import StatefulDataLoader

        kwargs: dict[str, Any] = {}
        if cmd.get("parallel", "process") != "process":
            kwargs["parallel_method"] = cmd["parallel"]
        return StatefulDataLoader.from_storage(
            self._pass_storage(cmd),
            sequence_length=int(cmd["sequence_length"]),
            batch_size=int(cmd["batch_size"]),
            shuffle=self._shuffle(cmd),
            seed=int(cmd.get("seed", 0)),
            num_workers=int(cmd["workers"]),
            **kwargs,
        )

    def run_pass(self, cmd: dict[str, Any]) -> dict[str, Any]:
        loader = self.loader(cmd)
        out = timed_epoch(loader)
        if cmd.get("report"):  # the shuffle report's prediction of the same epoch's reads
            import guideloom

            report = guideloom.shuffle_report(
                self.storages[cmd["name"]], self._shuffle(cmd), int(cmd["batch_size"]),
                sequence_length=int(cmd["sequence_length"]), seed=int(cmd.get("seed", 0)),
            )  # fmt: skip
            out["predicted"] = {
                "gets": report.gets, "bytes": report.bytes, "group_bytes": report.group_bytes,
                "full_shuffle": report.full_shuffle, "entropy_ratio": report.entropy_ratio,
                "regions_ratio": report.regions_ratio, "settings": report.settings,
            }  # fmt: skip
        return out


def collate_int32(samples: Any) -> Any:
    """GuideLoom 1.1's batches: its samples are ``{"tokens": uint16 array}``; one copy into the
    ``int32`` tensor this repository's loader hands out (what ``nn.Embedding`` takes)."""
    import numpy as np
    import torch

    out = np.empty((len(samples), len(samples[0]["tokens"]) if samples else 0), dtype=np.int32)
    for row, sample in enumerate(samples):
        out[row] = sample["tokens"]
    return torch.from_numpy(out)


def _guideloom11() -> Any:
    """Guide Labs' ``guideloom`` module, untyped: the type checker knows only this repository's."""
    import importlib

    return importlib.import_module("guideloom")


class GuideLoom11Peer:
    """Guide Labs' GuideLoom 1.1: ``StreamStorage(Path, StreamNumpyFormat(structured dtype), reader)``;
    its writer takes the shard number of every record, so records go to ~``shard_bytes`` shards
    in order; its loader needs ``open()`` (untimed, like reading our manifest) and a collate."""

    packages = ("guideloom", "torch", "torchdata", "numpy", "numba")

    def __init__(self) -> None:
        self.storages: dict[str, Any] = {}

    # Its byte-range readers (`guideloom.io`). The default, `SeekIO`, opens the shard file for
    # every sample (open, seek, readinto); a memory map or `preadv` read about twice as fast here,
    # so the comparison uses the memory map unless told otherwise.
    READERS = {"mmap": "MmapIO", "pread": "PosixPreadIO", "seek": "SeekIO"}

    def _storage(self, target: str, reader: str = "mmap") -> Any:
        import importlib

        import numpy as np

        gl = _guideloom11()
        if reader not in self.READERS:
            raise ValueError(f"guideloom11: unknown reader {reader!r}; choose from {', '.join(self.READERS)}")
        io = getattr(importlib.import_module("guideloom.io"), self.READERS[reader])()
        return gl.StreamStorage(Path(target), gl.StreamNumpyFormat(np.dtype([("tokens", np.uint16)])), io)

    def ingest(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd.get("s3"):
            raise ValueError("guideloom11: only local storage is benchmarked here")
        target = Path(cmd["target"])
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        storage = self._storage(str(target))
        per_shard = max(1, int(cmd["shard_bytes"]) // 2)  # uint16 tokens
        written = 0
        with storage.sync_writer() as writer:
            for doc in _documents(cmd["corpus"]):
                writer.append(written // per_shard, {"tokens": doc})
                written += len(doc)
        reader = cmd.get("reader", "mmap")
        self.storages[cmd["name"]] = self._storage(str(target), reader)
        return {"shards": (written + per_shard - 1) // per_shard, "tokens": written, "reader": reader}

    def run_pass(self, cmd: dict[str, Any]) -> dict[str, Any]:
        workers = int(cmd["workers"])
        loader = _guideloom11().StatefulDataLoader.from_storage(
            self.storages[cmd["name"]],
            collate_int32,
            sequence_length=int(cmd["sequence_length"]),
            local_batch_size=int(cmd["batch_size"]),
            num_workers=workers,
            parallel_method=cmd.get("parallel", "process"),
            shuffle=bool(cmd["shuffle"]),
            shuffle_seed=int(cmd.get("seed", 0)),
            drop_last=False,
            # Its default (0) leaves workers idle (it warns so); 2 batches, as torch's default.
            prefetch=2 if workers else 0,
        )
        with loader:
            return timed_epoch(loader)


class LitDataPeer:
    """LitData: ``optimize`` into ``TokensLoader`` chunks, read by ``StreamingDataset``.

    Remote datasets are optimized locally, then uploaded with boto3 (LitData's own dependency);
    each remote pass starts from an empty cache directory, so every epoch downloads its chunks.
    """

    packages = ("litdata", "torch", "numpy", "boto3")

    def __init__(self) -> None:
        self.datasets: dict[str, dict[str, Any]] = {}

    def ingest(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import litdata
        import numpy as np
        from litdata import TokensLoader

        corpus = cmd["corpus"]
        _, lengths = _corpus(corpus)
        ends = np.cumsum(lengths)
        groups = np.array_split(np.arange(len(lengths)), max(1, min(64, len(lengths))))
        spans = [(int(ends[g[0]] - lengths[g[0]]), int(ends[g[-1]])) for g in groups if len(g)]
        target = cmd["target"]
        s3 = cmd.get("s3")
        local = tempfile.mkdtemp(prefix="peers-litdata-") if s3 else target
        if not s3 and os.path.exists(local):
            shutil.rmtree(local)

        litdata.optimize(
            fn=_LitFn(corpus),
            inputs=spans,
            output_dir=local,
            chunk_bytes=int(cmd["shard_bytes"]),
            item_loader=TokensLoader(),
            num_workers=1,
            verbose=False,
            start_method="fork",
        )
        chunks = sorted(p for p in os.listdir(local) if p.endswith(".bin"))
        if s3:
            self._upload(local, target, s3)
            shutil.rmtree(local, ignore_errors=True)
        self.datasets[cmd["name"]] = {"target": target, "s3": s3}
        return {"shards": len(chunks)}

    @staticmethod
    def _client(s3: dict[str, Any]) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=s3["endpoint_url"],
            aws_access_key_id=s3["key"],
            aws_secret_access_key=s3["secret"],
            region_name=s3.get("region", "us-east-1"),
        )

    def _upload(self, local: str, url: str, s3: dict[str, Any]) -> None:
        bucket, _, prefix = url[len("s3://") :].partition("/")
        client = self._client(s3)
        for name in sorted(os.listdir(local)):
            client.upload_file(os.path.join(local, name), bucket, f"{prefix}/{name}")

    def run_pass(self, cmd: dict[str, Any]) -> dict[str, Any]:
        from litdata import StreamingDataLoader, StreamingDataset, TokensLoader
        from litdata.streaming.resolver import Dir

        ds = self.datasets[cmd["name"]]
        cache = None
        if ds["s3"]:
            cache = tempfile.mkdtemp(prefix="peers-litdata-cache-")
            _litdata_allow_http()
            s3 = ds["s3"]
            source: Any = Dir(path=cache, url=ds["target"])
            options = {
                "endpoint_url": cmd.get("endpoint_url") or s3["endpoint_url"],
                "aws_access_key_id": s3["key"],
                "aws_secret_access_key": s3["secret"],
            }
        else:
            source, options = ds["target"], None
        try:
            dataset = StreamingDataset(
                source,
                item_loader=TokensLoader(block_size=int(cmd["sequence_length"])),
                shuffle=bool(cmd["shuffle"]),
                seed=int(cmd.get("seed", 0)),
                storage_options=options,
            )
            loader = StreamingDataLoader(
                dataset, batch_size=int(cmd["batch_size"]), num_workers=int(cmd["workers"])
            )
            result = timed_epoch(loader)
            if cache is not None:  # what the epoch left on local disk (LitData keeps its chunks)
                result["local_disk_bytes"] = sum(
                    p.stat().st_size for p in Path(cache).rglob("*") if p.is_file()
                )
            return result
        finally:
            if cache is not None:
                shutil.rmtree(cache, ignore_errors=True)


class MosaicPeer:
    """MosaicML Streaming: ``MDSWriter`` shards of fixed 2048-token samples, read by
    ``StreamingDataset`` (remote datasets only: each pass downloads whole shards into a fresh
    local cache directory, as LitData does). Its S3 client takes the endpoint and keys from the
    environment (``S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``), set before the loader's workers fork.
    """

    packages = ("mosaicml-streaming", "torch", "numpy", "boto3")

    def __init__(self) -> None:
        self.datasets: dict[str, dict[str, Any]] = {}
        _mosaic_without_vision()

    def ingest(self, cmd: dict[str, Any]) -> dict[str, Any]:
        import numpy as np
        from streaming import MDSWriter

        s3 = cmd.get("s3")
        if not s3:
            raise ValueError("the Mosaic peer reads from S3 only (its local rows are LitData's)")
        length = int(cmd.get("sequence_length", 2048))
        tokens, _ = _corpus(cmd["corpus"])
        local = tempfile.mkdtemp(prefix="peers-mosaic-")
        try:
            with MDSWriter(
                out=local, columns={"tokens": f"ndarray:uint16:{length}"}, size_limit=int(cmd["shard_bytes"])
            ) as writer:
                for lo in range(0, len(tokens) - length + 1, length):
                    writer.write({"tokens": np.array(tokens[lo : lo + length], dtype=np.uint16)})
            shards = sorted(p for p in os.listdir(local) if p.endswith(".mds"))
            LitDataPeer()._upload(local, cmd["target"], s3)
        finally:
            shutil.rmtree(local, ignore_errors=True)
        self.datasets[cmd["name"]] = {"target": cmd["target"], "s3": s3}
        return {"shards": len(shards)}

    def run_pass(self, cmd: dict[str, Any]) -> dict[str, Any]:
        from streaming import StreamingDataLoader, StreamingDataset
        from streaming.base.util import clean_stale_shared_memory

        ds = self.datasets[cmd["name"]]
        s3 = ds["s3"]
        os.environ["S3_ENDPOINT_URL"] = cmd.get("endpoint_url") or s3["endpoint_url"]
        os.environ["AWS_ACCESS_KEY_ID"] = s3["key"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = s3["secret"]
        cache = tempfile.mkdtemp(prefix="peers-mosaic-cache-")
        clean_stale_shared_memory()
        try:
            dataset = StreamingDataset(
                remote=ds["target"],
                local=cache,
                shuffle=bool(cmd["shuffle"]),
                shuffle_seed=int(cmd.get("seed", 0)),
                batch_size=int(cmd["batch_size"]),
            )
            loader = StreamingDataLoader(
                dataset, batch_size=int(cmd["batch_size"]), num_workers=int(cmd["workers"]),
                collate_fn=collate_int32,
            )  # fmt: skip
            result = timed_epoch(loader)
            result["local_disk_bytes"] = sum(p.stat().st_size for p in Path(cache).rglob("*") if p.is_file())
            del loader, dataset
            return result
        finally:
            shutil.rmtree(cache, ignore_errors=True)
            clean_stale_shared_memory()


def _mosaic_without_vision() -> None:
    """Import MosaicML Streaming without its vision datasets (``streaming.vision``), unused here.

    ``import streaming`` imports them, and they import torchvision, whose PyPI wheel is built
    against CUDA torch and fails to load beside the CPU torch these environments pin (``operator
    torchvision::nms does not exist``). An empty ``streaming.vision`` module stands in for that
    one subpackage; the writer, ``StreamingDataset`` and its downloads are Mosaic's own code.
    """
    import importlib.util
    import types

    if "streaming" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to load: leave the vision datasets out
        sys.modules["streaming.vision"] = types.ModuleType("streaming.vision")


def _litdata_allow_http() -> None:
    """Let LitData's chunk downloads reach the local server, which speaks plain http.

    LitData 0.2.7x fetches chunks with obstore and passes it fixed client options, so obstore's
    own ``AWS_ALLOW_HTTP`` variable is not consulted; without ``allow_http`` every GET fails
    ("BadScheme"). Adding that one option keeps LitData's fast path (obstore) unchanged; on real
    S3 (https) it is not needed. Forked DataLoader workers inherit it.
    """
    from litdata.streaming import downloader

    options = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(options, dict):
        options["allow_http"] = "true"


class _LitFn:
    """LitData's ``optimize`` function: a span of the raw corpus as one ``uint16`` tensor."""

    def __init__(self, corpus: str) -> None:
        self.corpus = corpus

    def __call__(self, span: tuple[int, int]) -> Any:
        import numpy as np
        import torch

        tokens, _ = _corpus(self.corpus)
        yield torch.from_numpy(np.array(tokens[span[0] : span[1]], dtype=np.uint16))


def _versions(packages: list[str] | tuple[str, ...]) -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def make_peer(system: str) -> Any:
    if system == "guideloom":
        return GuideLoomPeer()
    if system == "guideloom11":
        return GuideLoom11Peer()
    if system == "litdata":
        return LitDataPeer()
    if system == "mosaic":
        return MosaicPeer()
    raise SystemExit(f"peers_worker: unknown system {system!r}; choose from {', '.join(SYSTEMS)}")


def serve(system: str, commands: Any, replies: Any) -> None:
    peer = make_peer(system)
    for line in commands:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            if op == "quit":
                reply: dict[str, Any] = {"ok": True}
            elif op == "versions":
                reply = {
                    "python": sys.version.split()[0],
                    "executable": sys.executable,
                    "packages": _versions(cmd.get("packages") or peer.packages),
                }
            elif op == "ingest":
                t0 = time.perf_counter()
                reply = peer.ingest(cmd)
                reply["seconds"] = time.perf_counter() - t0
            elif op == "pass":
                reply = peer.run_pass(cmd)
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as err:  # noqa: BLE001 - reported to the driver, which names the system
            reply = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if op == "quit":
            return


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(f"usage: python -I {Path(__file__).name} {{{','.join(SYSTEMS)}}} [IMPORT_ROOT]")
    if len(sys.argv) == 3:  # this repository's GuideLoom: its root goes first on the path
        sys.path.insert(0, sys.argv[2])
    # Replies own the real stdout; anything the libraries print (progress bars, warnings) goes
    # to stderr, C-level writes included.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.argv[1], sys.stdin, replies)


if __name__ == "__main__":
    main()
