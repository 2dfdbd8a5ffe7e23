"""The peers driver's own parts (`python -m benchmarks.peers`), without building any environment.

The command line, the raw corpus, the rows and table built from the workers' replies, and one
round trip through the worker protocol with this repository's GuideLoom on a tiny corpus (the
same worker script the peers run under their own interpreters; marked slow: it starts a Python
that imports torch). Nothing here is timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import peers  # noqa: E402
from benchmarks.harness import table_lines  # noqa: E402


def test_command_line_defaults() -> None:
    args = peers.parse_args([])
    assert args.systems == ("litdata", "guideloom11")
    assert args.parts == ("local", "s3")
    assert args.shard_bytes == 4 * 2**20
    assert not args.no_build and not args.quick


def test_command_line_subsets() -> None:
    args = peers.parse_args(
        ["--systems", "litdata", "--parts", "s3", "--repeats", "5", "--no-build", "--gl11-reader", "seek"]
    )
    assert args.systems == ("litdata",) and args.gl11_reader == "seek"
    assert args.parts == ("s3",)
    assert args.repeats == 5 and args.no_build
    assert args.s3_shuffles == (True, "block")
    args = peers.parse_args(
        ["--systems", "litdata,mosaic", "--s3-shuffles", "block,block:window_bytes=8388608"]
    )
    assert args.systems == ("litdata", "mosaic")
    assert args.s3_shuffles == ("block", {"mode": "block", "window_bytes": 8 * 2**20})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--systems", "litdata,webdataset"],
            "unknown systems ['webdataset']; choose from litdata,guideloom11,mosaic",
        ),
        (["--s3-shuffles", "block:window=3"], "use block_bytes=N, window_bytes=N or window_blocks=N"),
        (["--s3-shuffles", "random"], "is not full, block or block:KEY=VALUE"),
        (["--parts", "gpu"], "unknown parts ['gpu']; choose from local,s3"),
        (["--systems", ""], "need at least one"),
        (["--tokens", "0"], "--tokens must be positive"),
        (["--gl11-reader", "fast"], "invalid choice: 'fast'"),
    ],
)
def test_command_line_refuses_bad_input(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        peers.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_env_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(peers.ENV_VAR, str(tmp_path / "envs"))
    assert peers.env_dir() == tmp_path / "envs"
    monkeypatch.delenv(peers.ENV_VAR)
    assert peers.env_dir() == Path.home() / ".cache" / "guideloom-peers"


def test_missing_environment_without_build_names_the_peer(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"guideloom11: no environment at .*--no-build"):
        peers.build_env(peers.PEERS["guideloom11"], tmp_path, build=False)


def test_find_python() -> None:
    assert peers.find_python("") == sys.executable
    with pytest.raises(FileNotFoundError, match="no interpreter matches /nonexistent/3.13"):
        peers.find_python("/nonexistent/3.13*/bin/python")


def test_write_corpus(tmp_path: Path) -> None:
    out = peers.write_corpus(tmp_path / "c", 100_000, seed=3)
    tokens = np.load(out / "tokens.npy")
    lengths = np.load(out / "lengths.npy")
    assert tokens.dtype == np.uint16 and len(tokens) == 100_000
    assert int(tokens.max()) < peers.VOCAB
    assert lengths.dtype == np.int64 and int(lengths.sum()) == 100_000 and (lengths > 0).all()
    # The same seed gives the same corpus; an existing one of the right size is kept as it is.
    again = peers.write_corpus(tmp_path / "d", 100_000, seed=3)
    assert np.array_equal(np.load(again / "tokens.npy"), tokens)
    stamp = (out / "tokens.npy").stat().st_mtime_ns
    peers.write_corpus(out, 100_000, seed=3)
    assert (out / "tokens.npy").stat().st_mtime_ns == stamp
    peers.write_corpus(out, 50_000, seed=3)  # another size: rewritten
    assert len(np.load(out / "tokens.npy")) == 50_000


def _pass(first_s: float, seconds: float, tokens: int = 16_384 * 9) -> dict[str, float]:
    return {"first_batch_s": first_s, "first_tokens": 16_384, "tokens": tokens, "seconds": seconds}


def test_rows_and_table() -> None:
    ours = [_pass(0.5, 1.0), _pass(0.5, 2.0), _pass(0.5, 4.0)]
    theirs = [_pass(1.0, 2.0), _pass(1.0, 4.0), _pass(1.0, 8.0)]
    steady = peers.rows_from_passes(
        "peer-gl11", "shuffle=off workers=0", "GuideLoom 1.1", ours, theirs, target=1.0
    )
    assert steady.guideloom.median == pytest.approx(16_384 * 9 / 2.0)
    assert steady.ratio == pytest.approx(2.0) and steady.met is True
    remote = peers.rows_from_passes(
        "peer-litdata-s3", "end to end", "LitData", ours, theirs, peers.end_to_end_rate, target=1.5
    )
    # End to end counts the first batch and its wait: 10 batches over 2.5 s against 5 s.
    assert remote.guideloom.median == pytest.approx(16_384 * 10 / 2.5)
    assert remote.ratio == pytest.approx(2.0)
    assert remote.extra["first_batch_s"] == 0.5 and remote.extra["peer_first_batch_s"] == 1.0
    assert remote.extra["steady_tokens_per_s"] == pytest.approx(16_384 * 9 / 2.0)
    lines = table_lines([steady, remote])
    assert lines[0].startswith("| row | case |") and len(lines) == 4
    assert (
        "| peer-gl11 | shuffle=off workers=0 | tokens/s |" in lines[2]
        and "| 2.00x | >= 1 | yes |" in lines[2]
    )
    assert "| peer-litdata-s3 |" in lines[3] and "| >= 1.5 | yes |" in lines[3]
    with pytest.raises(ValueError, match="peer-gl11 / x: no timed epochs on one side"):
        peers.rows_from_passes("peer-gl11", "x", "GuideLoom 1.1", ours, [])


@pytest.mark.slow  # a subprocess that imports torch and GuideLoom: a few seconds, more under load
def test_worker_round_trip(tmp_path: Path) -> None:
    """This repository's GuideLoom through the worker protocol: ingest, one epoch, a bad command."""
    corpus = peers.write_corpus(tmp_path / "corpus", 50_000, seed=0)
    proc = peers.PeerProcess("guideloom", sys.executable, tmp_path / "worker.log", str(ROOT))
    try:
        versions = proc.call(op="versions", packages=["numpy"])
        assert (
            versions["python"] == sys.version.split()[0] and versions["packages"]["numpy"] == np.__version__
        )
        done = proc.call(
            op="ingest", name="local", corpus=str(corpus), target=str(tmp_path / "ds"), shard_bytes=40_000
        )
        assert done["tokens"] == 50_000 and done["shards"] == 3
        epoch = proc.call(
            op="pass", name="local", shuffle=True, workers=0, batch_size=8, sequence_length=2048, seed=0
        )
        assert epoch["first_tokens"] + epoch["tokens"] == (50_000 // 2048) * 2048
        assert epoch["first_batch_s"] > 0 and epoch["seconds"] > 0
        with pytest.raises(peers.PeerError, match=r"guideloom: pass nope failed: KeyError"):
            proc.call(op="pass", name="nope", shuffle=False, workers=0, batch_size=8, sequence_length=2048)
    finally:
        proc.close()
    assert proc.proc.returncode == 0
