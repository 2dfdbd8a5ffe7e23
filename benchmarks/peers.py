"""``python -m benchmarks.peers`` (``make bench-peers``): GuideLoom beside its peers, in one run.

The peers are other libraries, each installed in its own virtual environment outside the project
(``$GUIDELOOM_PEERS_ENV``, default ``~/.cache/guideloom-peers``), built once with pip:

- ``litdata``: Lightning's LitData (``TokensLoader`` chunks read by ``StreamingDataset``), on the
  driver's Python with the same CPU torch;
- ``mosaic``: MosaicML Streaming (S3 rows only), on the driver's Python with the same CPU torch;
- ``guideloom11``: Guide Labs' GuideLoom 1.1 (``guideloom[torch]==1.1.0`` from PyPI), on Python
  3.13 from pyenv. Its import name is ``guideloom`` too, hence its own interpreter.

The driver writes one raw corpus (``tokens.npy``, every token as ``uint16``, and ``lengths.npy``,
the documents' lengths) and starts one worker process per system, this repository's GuideLoom
included (``benchmarks/peers_worker.py``, run isolated with ``python -I`` under that system's
interpreter). Each worker ingests the corpus its own way (untimed), then the driver times whole
epochs of 2048-token windows in batches of 8, GuideLoom and the peer alternating (A B A B ...).

Rows (GuideLoom / peer; throughput is tokens/s from the first batch to the last; the S3 row is
end to end, tokens of the whole epoch over the time from ``iter()`` to its last batch):

- ``peer-gl11``: local disk, shuffle off / on, ``num_workers`` 0 and 2, and 2 thread workers
  (``parallel_method="thread"`` on both). GuideLoom 1.1 reads through its memory-map reader
  (``guideloom.io.MmapIO``; its default ``SeekIO`` reopens the file per sample and is about half
  as fast; ``--gl11-reader`` picks another). Target >= 1.0.
- ``peer-litdata``: local disk, shuffle off / on, ``num_workers`` 0 and 2.
- ``peer-litdata-s3``: a shuffled epoch from the local S3 server (``benchmarks/s3env.py``: RGW
  when installed, else moto; ``GUIDELOOM_TEST_S3=moto`` picks moto), 2 workers, ~4 MiB shards
  and chunks. LitData downloads whole chunks into a fresh cache directory each epoch. GuideLoom
  with ``shuffle=True`` (a full permutation) and with ``shuffle="block"`` (``--s3-shuffles``
  picks the orders, e.g. ``block:window_bytes=8388608``). Target >= 1.5. One more epoch of each
  side goes through the counting proxy: GETs, bytes per GET, the largest response, the bytes the
  peer left on local disk, and GuideLoom's own prediction (`guideloom.shuffle_report`: GETs and
  read-group memory).
- ``peer-mosaic-s3`` (``--systems mosaic``): the same against MosaicML Streaming
  (``mosaicml-streaming``: ``MDSWriter`` shards of 2048-token samples, ``StreamingDataset``
  downloading whole shards into a fresh cache directory each epoch), GuideLoom's first order only.

Examples::

    python -m benchmarks.peers                        # everything, default sizes
    python -m benchmarks.peers --systems litdata --parts s3 --repeats 5
    python -m benchmarks.peers --systems litdata,mosaic --parts s3 --s3-tokens 19600000 --s3-shuffles block
    python -m benchmarks.peers --tokens 2000000 --s3-tokens 1000000 --quick
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import (
    Row,
    interleaved,
    results_payload,
    timed_run,
    workdir,
)

__all__ = [
    "ENV_VAR",
    "PEERS",
    "PeerSpec",
    "PeerProcess",
    "PeersConfig",
    "build_env",
    "env_dir",
    "find_python",
    "main",
    "parse_args",
    "rows_from_passes",
    "write_corpus",
]

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "peers_worker.py"
ENV_VAR = "GUIDELOOM_PEERS_ENV"
PARTS = ("local", "s3")
VOCAB = 50_257
CALL_TIMEOUT_S = 1800.0  # one ingest or one epoch; a hung worker must not hang the run


@dataclass(frozen=True)
class PeerSpec:
    """How to build one peer's environment."""

    system: str
    title: str  # how the table names it
    python: str  # a glob for the interpreter that creates the venv; "" = the driver's own
    requirements: tuple[str, ...]  # one pip command, pinned where it matters
    # Tried first, best effort: CPU-only torch from PyTorch's index (PyPI's default Linux wheel
    # pulls GBs of CUDA libraries). When that index is unreachable, pip takes PyPI's.
    torch_index: str | None = None
    packages: tuple[str, ...] = ()  # distributions whose versions the report records


PEERS: dict[str, PeerSpec] = {
    "litdata": PeerSpec(
        "litdata",
        "LitData TokensLoader",
        "",
        # The driver's torch (the Makefile's TORCH_PIN): a CPU wheel, not PyPI's CUDA-sized default.
        ("torch==2.13.0", "litdata", "numpy"),
        packages=("litdata", "torch", "numpy", "boto3", "obstore"),
    ),
    "guideloom11": PeerSpec(
        "guideloom11",
        "GuideLoom 1.1 (Guide Labs)",
        "~/.pyenv/versions/3.13*/bin/python",
        ("guideloom[torch]==1.1.0", "s3fs"),
        torch_index="https://download.pytorch.org/whl/cpu",
        packages=("guideloom", "torch", "torchdata", "numpy", "numba"),
    ),
    "mosaic": PeerSpec(
        "mosaic",
        "MosaicML Streaming",
        "",
        # The driver's CPU torch; mosaicml-streaming 0.13 wants numpy < 2.2.
        ("torch==2.13.0", "mosaicml-streaming", "numpy<2.2"),
        packages=("mosaicml-streaming", "torch", "numpy", "boto3"),
    ),
}


@dataclass
class PeersConfig:
    """What one run measures (the command-line flags)."""

    workdir: Path
    systems: tuple[str, ...] = ("litdata", "guideloom11")  # "mosaic" on request (S3 rows only)
    parts: tuple[str, ...] = PARTS
    tokens: int = 19_600_000  # the local corpus (as `make bench`'s local rows)
    s3_tokens: int = 8_000_000  # the S3 corpus: 16 MB, four 4 MiB shards
    shard_bytes: int = 4 * 2**20
    sequence_length: int = 2048
    batch_size: int = 8
    workers: int = 2
    repeats: int = 3
    seed: int = 0
    quick: bool = False
    build: bool = True
    gl11_reader: str = "mmap"  # GuideLoom 1.1's byte-range reader: mmap, pread or seek (its default)
    # GuideLoom's orders in the S3 rows: True (full), "block" (the byte-sized block shuffle at its
    # defaults) or a dict of `guideloom.Shuffle` settings (``--s3-shuffles``)
    s3_shuffles: tuple[Any, ...] = (True, "block")
    env_dir: Path = field(default_factory=lambda: env_dir())


def env_dir() -> Path:
    """Where the peers' environments live: ``$GUIDELOOM_PEERS_ENV`` or ``~/.cache/guideloom-peers``."""
    return Path(os.environ.get(ENV_VAR) or Path.home() / ".cache" / "guideloom-peers").expanduser()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = PeersConfig(workdir=Path("."), env_dir=Path("."))
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.peers",
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--systems", default=",".join(d.systems), help=f"peers to run; any of {','.join(PEERS)}")
    p.add_argument("--parts", default=",".join(d.parts), help=f"which rows; any of {','.join(PARTS)}")
    p.add_argument("--tokens", type=int, default=d.tokens, help="local corpus size in tokens")
    p.add_argument("--s3-tokens", type=int, default=d.s3_tokens, help="S3 corpus size in tokens")
    p.add_argument("--shard-bytes", type=int, default=d.shard_bytes, help="shard / chunk size in bytes")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed epochs per side and row")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--s3-shuffles",
        default="full,block",
        help="GuideLoom's orders in the S3 rows, comma-separated: full, block, or block settings "
        "as block:KEY=VALUE:... (guideloom.Shuffle's block_bytes, window_bytes, window_blocks)",
    )
    p.add_argument(
        "--gl11-reader",
        default=d.gl11_reader,
        choices=("mmap", "pread", "seek"),
        help="GuideLoom 1.1's reader (guideloom.io MmapIO, PosixPreadIO or its default SeekIO)",
    )
    p.add_argument(
        "--env-dir",
        default=None,
        help=f"the peers' environments (default: ${ENV_VAR} or ~/.cache/guideloom-peers)",
    )
    p.add_argument(
        "--no-build", action="store_true", help="use the environments as they are; fail if one is missing"
    )
    p.add_argument("--json", default="bench-results/peers.json", help="where to write the results")
    p.add_argument("--workdir", default=None, help="keep corpora here (default: a temporary directory)")
    p.add_argument("--quick", action="store_true", help="no warm-up epochs (smoke runs)")
    args = p.parse_args(argv)
    args.systems = tuple(s for s in args.systems.split(",") if s)
    args.parts = tuple(s for s in args.parts.split(",") if s)
    unknown = sorted(set(args.systems) - set(PEERS))
    if unknown:
        p.error(f"unknown systems {unknown}; choose from {','.join(PEERS)}")
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        p.error(f"unknown parts {unknown}; choose from {','.join(PARTS)}")
    if not args.systems or not args.parts:
        p.error("--systems and --parts need at least one name each")
    try:
        args.s3_shuffles = tuple(parse_shuffle(x) for x in args.s3_shuffles.split(",") if x)
    except ValueError as err:
        p.error(str(err))
    for name in ("tokens", "s3_tokens", "shard_bytes", "repeats"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    return args


def parse_shuffle(text: str) -> Any:
    """``full`` -> True, ``block`` -> "block", ``block:window_bytes=8388608:...`` -> Shuffle settings."""
    mode, *pairs = text.split(":")
    if mode == "full" and not pairs:
        return True
    if mode != "block":
        raise ValueError(f"--s3-shuffles: {text!r} is not full, block or block:KEY=VALUE:...")
    if not pairs:
        return "block"
    settings: dict[str, Any] = {"mode": "block"}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in ("block_bytes", "window_bytes", "window_blocks") or not value.isdigit():
            raise ValueError(
                f"--s3-shuffles: {pair!r} in {text!r}: use block_bytes=N, window_bytes=N or window_blocks=N"
            )
        settings[key] = int(value)
    return settings


# --- the corpus --------------------------------------------------------------------------------


def write_corpus(directory: Path, total_tokens: int, seed: int) -> Path:
    """The raw corpus every system ingests: ``tokens.npy`` (uint16) and ``lengths.npy`` (int64).

    Document lengths are those of ``make bench``'s corpus (log-normal, 16..16,384 tokens); token
    ids are uniform below 50,257. Rewritten only when missing or of another size.
    """
    from benchmarks.corpus import document_lengths

    directory.mkdir(parents=True, exist_ok=True)
    tokens_path, lengths_path = directory / "tokens.npy", directory / "lengths.npy"
    if tokens_path.exists() and lengths_path.exists():
        lengths = np.load(lengths_path)
        if int(lengths.sum()) == total_tokens and len(np.load(tokens_path, mmap_mode="r")) == total_tokens:
            return directory
    lengths = document_lengths(total_tokens, seed)
    tokens = np.random.default_rng(seed + 1).integers(0, VOCAB, size=total_tokens, dtype=np.uint16)
    np.save(tokens_path, tokens)
    np.save(lengths_path, lengths.astype(np.int64))
    return directory


# --- environments ------------------------------------------------------------------------------


def find_python(pattern: str) -> str:
    """The newest interpreter matching ``pattern`` (a glob; "" = the driver's own Python)."""
    if not pattern:
        return sys.executable
    found = sorted(glob.glob(os.path.expanduser(pattern)), key=_version_key)
    if not found:
        raise FileNotFoundError(
            f"no interpreter matches {pattern}: install one (e.g. `pyenv install 3.13`) to run this peer"
        )
    return found[-1]


def _version_key(path: str) -> tuple[int, ...]:
    parts = [p for p in Path(path).parts if p[:1].isdigit()]
    try:
        return tuple(int(x) for x in parts[-1].split(".")) if parts else ()
    except ValueError:
        return ()


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def build_env(spec: PeerSpec, root: Path, build: bool = True, log: Callable[[str], None] = print) -> Path:
    """The peer's venv under ``root`` (created once); returns its interpreter."""
    venv = root / spec.system
    stamp = venv / ".peers-env.json"
    wanted: dict[str, Any] = {"requirements": list(spec.requirements)}
    if stamp.exists() and json.loads(stamp.read_text()).get("requirements") == wanted["requirements"]:
        return _venv_python(venv)
    if not build:
        raise FileNotFoundError(
            f"{spec.system}: no environment at {venv}; run without --no-build to build it"
        )
    base = find_python(spec.python)
    log(f"building {spec.system}'s environment in {venv} with {base} ...")
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([base, "-m", "venv", "--upgrade-deps", str(venv)], check=True)
    pip = [str(_venv_python(venv)), "-m", "pip", "install", "--disable-pip-version-check"]
    if spec.torch_index:
        got = subprocess.run([*pip, "--index-url", spec.torch_index, "torch"], check=False)
        if got.returncode != 0:
            log(f"{spec.system}: {spec.torch_index} unreachable; torch comes from PyPI's default index")
    subprocess.run([*pip, *spec.requirements], check=True)
    wanted["python"] = base
    stamp.write_text(json.dumps(wanted, indent=1) + "\n")
    return _venv_python(venv)


# --- the worker processes ----------------------------------------------------------------------


class PeerError(RuntimeError):
    pass


class PeerProcess:
    """One worker (``peers_worker.py``) under ``python``; ``call`` sends a command, returns the reply."""

    def __init__(
        self, system: str, python: str | Path, log_path: Path, extra_path: str | None = None
    ) -> None:
        self.system = system
        self.log_path = log_path
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        env.setdefault("RAY_AUTH_MODE", "disabled")
        args = [str(python), "-I", str(WORKER), system]
        if extra_path:
            args.append(extra_path)
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, text=True
        )

    def call(self, timeout: float = CALL_TIMEOUT_S, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PeerError(self._died(cmd)) from None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close(kill=True)
            raise PeerError(
                f"{self.system}: {cmd.get('op')} gave no answer in {timeout:.0f} s; see {self.log_path}"
            )
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(self._died(cmd))
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise PeerError(
                f"{self.system}: {cmd.get('op')} {cmd.get('name', '')} failed: {reply['error']}\n"
                f"{reply.get('traceback', '')}(worker log: {self.log_path})"
            )
        return reply

    def _died(self, cmd: dict[str, Any]) -> str:
        code = self.proc.poll()
        return f"{self.system}: worker exited (status {code}) during {cmd.get('op')}; see {self.log_path}"

    def close(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            if not kill:
                with contextlib.suppress(Exception):
                    self.call(timeout=30, op="quit")
            with contextlib.suppress(Exception):
                self.proc.wait(timeout=30 if not kill else 0.1)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._log.close()


# --- rows --------------------------------------------------------------------------------------


def steady_rate(p: dict[str, Any]) -> float:
    """Tokens/s from the first batch to the last (the one-off start is reported apart)."""
    return p["tokens"] / p["seconds"] if p["seconds"] > 0 else float("inf")


def end_to_end_rate(p: dict[str, Any]) -> float:
    """Tokens/s of the whole epoch, from ``iter()`` to the last batch."""
    total = p["first_batch_s"] + p["seconds"]
    return (p["first_tokens"] + p["tokens"]) / total if total > 0 else float("inf")


def rows_from_passes(
    row: str,
    case: str,
    baseline_name: str,
    ours: Sequence[dict[str, Any]],
    theirs: Sequence[dict[str, Any]],
    rate: Callable[[dict[str, Any]], float] = steady_rate,
    target: float | None = None,
) -> Row:
    """A table row from both sides' timed epochs (what the workers replied)."""
    from benchmarks.harness import stats

    if not ours or not theirs:
        raise ValueError(f"{row} / {case}: no timed epochs on one side ({len(ours)} against {len(theirs)})")
    extra: dict[str, Any] = {
        "first_batch_s": float(np.median([p["first_batch_s"] for p in ours])),
        "peer_first_batch_s": float(np.median([p["first_batch_s"] for p in theirs])),
        "tokens": ours[0]["first_tokens"] + ours[0]["tokens"],
        "peer_tokens": theirs[0]["first_tokens"] + theirs[0]["tokens"],
    }
    disk = [p["local_disk_bytes"] for p in theirs if "local_disk_bytes" in p]
    if disk:
        extra["peer_local_disk_bytes"] = max(disk)
    if rate is end_to_end_rate:
        extra["steady_tokens_per_s"] = float(np.median([steady_rate(p) for p in ours]))
        extra["peer_steady_tokens_per_s"] = float(np.median([steady_rate(p) for p in theirs]))
    return Row(
        row,
        case,
        "tokens/s",
        stats([rate(p) for p in ours]),
        stats([rate(p) for p in theirs]),
        baseline_name,
        target=target,
        extra=extra,
    )


def _race(
    ours: PeerProcess,
    theirs: PeerProcess,
    ours_cmd: dict[str, Any],
    theirs_cmd: dict[str, Any],
    cfg: PeersConfig,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Epochs of both, alternating, the warm-up (unless ``quick``) left out."""
    got: dict[str, list[dict[str, Any]]] = {"ours": [], "theirs": []}

    def side(name: str, proc: PeerProcess, cmd: dict[str, Any]) -> Callable[[], float]:
        def one() -> float:
            p = proc.call(op="pass", **cmd)
            got[name].append(p)
            return steady_rate(p)

        return one

    interleaved(
        side("ours", ours, ours_cmd), side("theirs", theirs, theirs_cmd), cfg.repeats, warmup=not cfg.quick
    )
    skip = 0 if cfg.quick else 1
    return got["ours"][skip:], got["theirs"][skip:]


def _shuffle_name(shuffle: Any) -> str:
    if isinstance(shuffle, dict):
        return "block(" + ", ".join(f"{k}={v}" for k, v in shuffle.items() if k != "mode") + ")"
    return {False: "off", True: "on"}.get(shuffle, str(shuffle))


# (shuffle, workers, parallel method)
GL11_CASES: tuple[tuple[Any, int, str], ...] = (
    (False, 0, "process"),
    (True, 0, "process"),
    (False, 2, "process"),
    (True, 2, "process"),
    (False, 2, "thread"),
    (True, 2, "thread"),
)
LITDATA_CASES: tuple[tuple[Any, int], ...] = ((False, 0), (True, 0), (False, 2), (True, 2))


def local_rows(
    cfg: PeersConfig, ours: PeerProcess, peers: dict[str, PeerProcess], log: Callable[[str], None]
) -> list[Row]:
    base = {"batch_size": cfg.batch_size, "sequence_length": cfg.sequence_length, "seed": cfg.seed}
    rows = []
    if "guideloom11" in peers:
        for shuffle, workers, method in GL11_CASES:
            cmd = {**base, "name": "local", "shuffle": shuffle, "workers": workers, "parallel": method}
            kind = f"{workers} threads" if method == "thread" else f"workers={workers}"
            case = f"shuffle={_shuffle_name(shuffle)} {kind}"
            log(f"peer-gl11 {case} ...")
            a, b = _race(ours, peers["guideloom11"], cmd, cmd, cfg)
            rows.append(rows_from_passes("peer-gl11", case, PEERS["guideloom11"].title, a, b, target=1.0))
    if "litdata" in peers:
        for shuffle, workers in LITDATA_CASES:
            cmd = {**base, "name": "local", "shuffle": shuffle, "workers": workers}
            case = f"shuffle={_shuffle_name(shuffle)} workers={workers}"
            log(f"peer-litdata {case} ...")
            a, b = _race(ours, peers["litdata"], cmd, cmd, cfg)
            rows.append(rows_from_passes("peer-litdata", case, PEERS["litdata"].title, a, b))
    return rows


def counted_pass(proc: PeerProcess, proxy: Any, cmd: dict[str, Any]) -> dict[str, Any]:
    """One epoch through the counting proxy: GETs, bytes and the largest response at the proxy."""
    proxy.reset()
    p = proc.call(op="pass", endpoint_url=proxy.url, **cmd)
    gets = [e for e in proxy.log if e.method == "GET"]
    delivered = (p["first_tokens"] + p["tokens"]) * 2  # uint16 tokens
    objects: dict[str, list[int]] = {}  # per object (last path part): [GETs, bytes]
    for e in gets:
        name = e.path.split("?", 1)[0].rsplit("/", 1)[-1]
        objects.setdefault(name, [0, 0])
        objects[name][0] += 1
        objects[name][1] += e.bytes
    return {
        "by_object": objects,
        "gets": len(gets),
        "requests": proxy.request_count,
        "bytes": proxy.bytes_out,
        "bytes_per_get": proxy.bytes_out / max(1, len(gets)),
        "max_get_bytes": max((e.bytes for e in gets), default=0),
        "amplification": proxy.bytes_out / max(1, delivered),
        "local_disk_bytes": p.get("local_disk_bytes", 0),
        "predicted": p.get("predicted"),
    }


def s3_rows(
    cfg: PeersConfig,
    ours: PeerProcess,
    peers: dict[str, PeerProcess],
    log: Callable[[str], None],
    endpoint: Any = None,
) -> list[Row]:
    """GuideLoom's S3 orders against LitData's shuffled epoch (and MosaicML Streaming's, when it
    runs), end to end; with ``endpoint``, one more epoch of each through the counting proxy."""
    base = {"batch_size": cfg.batch_size, "sequence_length": cfg.sequence_length, "seed": cfg.seed}
    theirs_cmd = {**base, "name": "s3", "shuffle": True, "workers": cfg.workers}
    theirs_counts: dict[str, dict[str, Any]] = {}
    rows = []
    for peer in ("litdata", "mosaic"):
        if peer not in peers:
            continue
        for shuffle in cfg.s3_shuffles:
            ours_cmd = {**base, "name": "s3", "shuffle": shuffle, "workers": cfg.workers}
            title = PEERS[peer].title
            case = (
                f"GuideLoom shuffle={_shuffle_name(shuffle)} vs {title} shuffle=True, "
                f"{cfg.workers} workers, end to end"
            )
            log(f"peer-{peer}-s3 {case} ...")
            a, b = _race(ours, peers[peer], ours_cmd, theirs_cmd, cfg)
            row = rows_from_passes(
                f"peer-{peer}-s3", case, title + " (whole-shard downloads)", a, b, end_to_end_rate,
                1.5 if peer == "litdata" else None,
            )  # fmt: skip
            if endpoint is not None:  # one more epoch of each through the counting proxy
                from benchmarks.s3env import CountingProxy

                with CountingProxy(endpoint.url) as proxy:
                    mine = counted_pass(ours, proxy, {**ours_cmd, "report": shuffle is not True})
                    if peer not in theirs_counts:
                        theirs_counts[peer] = counted_pass(peers[peer], proxy, theirs_cmd)
                row.extra["counted"] = mine
                row.extra["peer_counted"] = theirs_counts[peer]
                c = theirs_counts[peer]
                log(
                    f"  GETs per epoch: GuideLoom {mine['gets']} ({mine['bytes_per_get'] / 2**20:.2f} MiB "
                    f"per GET, x{mine['amplification']:.2f} bytes), {peer} {c['gets']} "
                    f"({c['bytes_per_get'] / 2**20:.2f} MiB per GET, "
                    f"{c['local_disk_bytes'] / 2**20:.1f} MiB on local disk)"
                )
            rows.append(row)
            if peer == "mosaic":
                break  # Mosaic: against GuideLoom's first order only (LitData's rows cover the rest)
    return rows


def run(cfg: PeersConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build (once) and start every system, ingest, time the rows; the JSON payload."""
    pythons = {s: build_env(PEERS[s], cfg.env_dir, cfg.build, log) for s in cfg.systems}
    results: list[Row] = []
    failures: dict[str, str] = {}
    ingest: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        procs: dict[str, PeerProcess] = {}

        def start(system: str, python: str | Path, extra_path: str | None = None) -> PeerProcess:
            proc = PeerProcess(system, python, cfg.workdir / f"worker-{system}.log", extra_path)
            stack.callback(proc.close)
            procs[system] = proc
            return proc

        ours = start("guideloom", sys.executable, str(ROOT))
        peers = {s: start(s, py) for s, py in pythons.items()}
        versions = {
            name: proc.call(op="versions", packages=list(PEERS[name].packages) if name in PEERS else None)
            for name, proc in procs.items()
        }
        for name, v in versions.items():
            log(f"{name}: Python {v['python']}, {v['packages']}")

        if "local" in cfg.parts:
            corpus = write_corpus(cfg.workdir / "corpus-local", cfg.tokens, cfg.seed)
            for name, proc in procs.items():
                if name == "mosaic":  # an S3 peer only
                    continue
                target = str(cfg.workdir / f"{name}-local")
                log(f"{name}: ingesting the local corpus ...")
                ingest[f"{name} local"] = proc.call(
                    op="ingest",
                    name="local",
                    corpus=str(corpus),
                    target=target,
                    shard_bytes=cfg.shard_bytes,
                    reader=cfg.gl11_reader,
                )
            try:
                results.extend(local_rows(cfg, ours, peers, log))
            except PeerError as err:
                failures["local"] = str(err)
                log(f"local rows FAILED: {err}")
        server: dict[str, Any] = {}
        if "s3" in cfg.parts and ("litdata" in peers or "mosaic" in peers):
            from benchmarks.s3env import fresh_bucket, running_endpoint

            corpus = write_corpus(cfg.workdir / "corpus-s3", cfg.s3_tokens, cfg.seed)
            log("starting the S3 server ...")
            ep, note = stack.enter_context(running_endpoint())
            server = {"backend": ep.backend, "description": ep.description, "note": note}
            bucket = stack.enter_context(fresh_bucket(ep.storage_options()))
            s3 = {"endpoint_url": ep.url, "key": ep.key, "secret": ep.secret}
            for name in [n for n in ("guideloom", "litdata", "mosaic") if n in procs]:
                log(f"{name}: ingesting the S3 corpus ...")
                ingest[f"{name} s3"] = procs[name].call(
                    op="ingest",
                    name="s3",
                    corpus=str(corpus),
                    target=f"s3://{bucket}/{name}",
                    shard_bytes=cfg.shard_bytes,
                    sequence_length=cfg.sequence_length,
                    s3=s3,
                )
            try:
                results.extend(s3_rows(cfg, ours, peers, log, ep))
            except PeerError as err:
                failures["s3"] = str(err)
                log(f"s3 rows FAILED: {err}")
    return results_payload(cfg, results, failures, peers=versions, ingest=ingest, s3_server=server)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with workdir(args.workdir, "guideloom-peers-") as work:
        cfg = PeersConfig(
            workdir=work,
            systems=args.systems,
            parts=args.parts,
            tokens=args.tokens,
            s3_tokens=args.s3_tokens,
            shard_bytes=args.shard_bytes,
            repeats=args.repeats,
            seed=args.seed,
            quick=args.quick,
            build=not args.no_build,
            gl11_reader=args.gl11_reader,
            s3_shuffles=args.s3_shuffles,
            env_dir=Path(args.env_dir).expanduser() if args.env_dir else env_dir(),
        )
        payload = timed_run(lambda log: run(cfg, log=log), args.json)
    m = payload["machine"]
    print(
        f"\n{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {payload['total_seconds']} s; JSON: {args.json}"
    )
    for name, v in payload["peers"].items():
        print(f"{name}: Python {v['python']}; " + ", ".join(f"{k} {x}" for k, x in v["packages"].items()))
    if payload["s3_server"]:
        print(f"S3: {payload['s3_server']['description']}")
    for name, why in payload["failures"].items():
        print(f"{name} FAILED: {why}", file=sys.stderr)
    return 1 if payload["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
