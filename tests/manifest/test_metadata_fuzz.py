"""A fuzz suite of the metadata that opens a dataset (issue 32), on local disk and S3.

A dataset with several snapshots (a write, appends whose table pieces merge, a rollback) is
built once per module. Each example mutates one field of one metadata file (a snapshot record,
the ``manifest.json`` copy, a table piece, a part record) or re-serializes the file with other
whitespace, opens the dataset and reads every window, then restores the file. The open must
either read exactly the original windows or raise a `ManifestError` that names the file and
the field; nothing outside the dataset root may be opened (watched at the filesystem layer on
local disk, in the request log of a counting proxy on S3); and no message may quote file bytes
beyond a short excerpt of the mutated value.

The default suite runs a bounded number of examples; ``GUIDELOOM_FUZZ_EXAMPLES=100000`` runs
that many on local disk (and a tenth of them on S3).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import ManifestError, ShardNotFoundError
from guideloom.manifest import parse_part_record

FMT = StreamNumpyFormat({"tokens": np.uint16})
WINDOW = 37
SECRET = b"SECRET-BYTES-0b4d1e-do-not-echo"
LONG = os.environ.get("GUIDELOOM_FUZZ_EXAMPLES")
LOCAL_EXAMPLES = int(LONG) if LONG else 150
S3_EXAMPLES = max(int(LONG) // 10, 1) if LONG else 30
COUNT_FILE = os.environ.get("GUIDELOOM_FUZZ_COUNT_FILE")  # a long run appends its example count
ECHO = 100  # no run of this many characters of a metadata file may appear in a message


# -- the dataset --------------------------------------------------------------------------------


@dataclass
class Fixture:
    url: str
    options: dict[str, Any]
    fs: Any  # raw fsspec filesystem: set-up and tampering never go through GuideLoom
    root: str  # the dataset root in ``fs``
    files: dict[str, bytes]  # metadata file (relative to the root) -> its original bytes
    windows: list[bytes]
    victim_piece: str  # a table piece of another dataset beside this one


def _build(url: str, options: dict[str, Any], fs: Any, root: str, base: str) -> Fixture:
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=256) as w:
        for i in range(12):
            w.append({"tokens": np.arange(i, i + 150 + 7 * i, dtype=np.uint16)})
    for k in range(3):  # appends: pieces, one merge
        with storage.writer(append=True, shard_size=256) as w:
            for i in range(2 + k):
                w.append({"tokens": np.arange(k * 100 + i, k * 100 + i + 120, dtype=np.uint16)})
    storage.rollback(storage.snapshots()[-2].id)
    with storage.writer(append=True, shard_size=256) as w:
        w.append({"tokens": np.arange(900, 1100, dtype=np.uint16)})
    with storage.writer(part=0, run="pending", append=True) as w:  # a part record not yet committed
        w.append({"tokens": np.arange(30, dtype=np.uint16)})
    victim = StreamStorage(f"{url.rsplit('/', 1)[0]}/victim", FMT, storage_options=options)
    with victim.writer() as w:
        w.append({"tokens": np.arange(50, dtype=np.uint16)})
    fs.pipe_file(f"{base}/secret.txt", SECRET)
    files = {
        p[len(root) + 1 :]: fs.cat_file(p)
        for p in fs.find(root)
        if p.endswith(".json") and "/shards/" not in p
    }
    victim_piece = next(p for p in fs.find(f"{base}/victim/snapshots/tables"))
    ds = StreamDataset(StreamStorage(url, FMT, storage_options=options), sequence_length=WINDOW)
    windows = [ds[i]["tokens"].tobytes() for i in range(len(ds))]
    assert any(name.startswith("snapshots/tables/") for name in files)
    assert any(name.startswith("parts/") for name in files)
    return Fixture(url, options, fs, root, files, windows, victim_piece.rsplit("/", 1)[-1])


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory) -> Fixture:
    base = tmp_path_factory.mktemp("fuzz")
    fs = fsspec.filesystem("file")
    return _build(str(base / "ds"), {}, fs, str(base / "ds"), str(base))


@pytest.fixture(scope="module")
def s3_dataset(s3_options) -> Iterator[Fixture]:
    import s3server

    with s3server.fresh_bucket(s3_options) as bucket:
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_options)
        yield _build(f"s3://{bucket}/ds", dict(s3_options), fs, f"{bucket}/ds", bucket)


# -- mutations ----------------------------------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON value: dict keys and list items, nested."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):  # the first items stand for the rest
            yield from _leaves(item, (*path, i))


def _replacements(original: Any, victim_piece: str) -> st.SearchStrategy[Any]:
    """What a damaged or hostile bucket might put in place of ``original``."""
    paths = [
        "../secret.txt",
        "../../secret.txt",
        f"../victim/snapshots/tables/{victim_piece}",
        f"snapshots/tables/../../victim/snapshots/tables/{victim_piece}",
        "/etc/passwd",
        "/" + (original if isinstance(original, str) else "x"),
        "file:///etc/passwd",
        "s3://other-bucket/secret.txt",
        "http://127.0.0.1:9/secret.txt",
        "C:\\secret.txt",
        "snapshots/tables/./x.json",
        "snapshots//tables/x.json",
        "~/secret.txt",
        "snapshots/tables/x.json\x00",
        "a" * 100_000,
        "",
    ]
    choices: list[st.SearchStrategy[Any]] = [
        st.sampled_from(paths),
        st.sampled_from([None, True, False, [], {}, 1.5, "x", 0, -1, 2**63, 2**64, -(2**63) - 1, 10**40]),
        st.integers(),
        st.text(max_size=20),
    ]
    if isinstance(original, bool):
        choices.append(st.just(not original))
    elif isinstance(original, int):
        choices.append(
            st.sampled_from([original + 1, original - 1, -original, original * 2, original + 2**32])
        )
    elif isinstance(original, str):
        choices.append(
            st.sampled_from(
                [
                    f"../{original}",
                    f"{original}/..",
                    f"/{original}",
                    f" {original}",
                    original.upper(),
                    original[:-1],
                    f"{original}\x00",
                    original * 50,
                ]
            )
        )
    elif isinstance(original, list):
        choices.append(st.sampled_from([original[:-1], [*original, *original[-1:]], original[::-1]]))
    return st.one_of(*choices)


def _set(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@dataclass
class Mutation:
    file: str
    path: tuple[Any, ...]  # empty: the whole file re-serialized
    data: bytes
    injected: str  # a path-like string the mutation put in, or ""


@st.composite
def mutations(draw: st.DrawFn, fixture: Fixture) -> Mutation:
    file = draw(st.sampled_from(sorted(fixture.files)))
    doc = json.loads(fixture.files[file])
    if draw(st.integers(0, 9)) == 0:  # the same content, other whitespace and key order
        indent = draw(st.sampled_from([None, 0, 1, 2, 4, "\t"]))
        text = json.dumps(doc, indent=indent, sort_keys=draw(st.booleans()))
        return Mutation(file, (), (" \n" * draw(st.integers(0, 2)) + text + "\n").encode(), "")
    path = draw(st.sampled_from([p for p in _leaves(doc) if p]))
    original = doc
    for key in path:
        original = original[key]
    delete = isinstance(path[-1], str) and draw(st.integers(0, 7)) == 0
    value = None if delete else draw(_replacements(original, fixture.victim_piece))
    if draw(st.integers(0, 15)) == 0 and isinstance(path[-1], str):  # an extra, unknown key
        _set(doc, (*path[:-1], f"{path[-1]}_extra"), value, False)
    else:
        _set(doc, path, value, delete)
    compact = draw(st.booleans())
    data = json.dumps(doc, separators=(",", ":") if compact else None).encode()
    return Mutation(file, path, data, value if isinstance(value, str) else "")


# -- watching what is opened --------------------------------------------------------------------


@contextlib.contextmanager
def watch_local_paths() -> Iterator[list[str]]:
    """Every path given to ``open``, ``os.open``, ``os.stat``, ``os.listdir`` and ``os.scandir``
    (what fsspec's LocalFileSystem and GuideLoom's local readers use) while inside."""
    seen: list[str] = []
    real = {
        "open": builtins.open,
        "os_open": os.open,
        "stat": os.stat,
        "listdir": os.listdir,
        "scandir": os.scandir,
    }

    def wrap(fn):
        def watched(path, *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)):
                seen.append(os.fsdecode(path))
            return fn(path, *args, **kwargs)

        return watched

    builtins.open = wrap(real["open"])
    os.open = wrap(real["os_open"])
    os.stat = wrap(real["stat"])
    os.listdir = wrap(real["listdir"])
    os.scandir = wrap(real["scandir"])
    try:
        yield seen
    finally:
        builtins.open = real["open"]
        os.open = real["os_open"]
        os.stat = real["stat"]
        os.listdir = real["listdir"]
        os.scandir = real["scandir"]


# -- the property ---------------------------------------------------------------------------------


def _open_and_read(fixture: Fixture, options: dict[str, Any]) -> list[bytes] | Exception:
    try:
        ds = StreamDataset(StreamStorage(fixture.url, FMT, storage_options=options), sequence_length=WINDOW)
        return [w["tokens"].tobytes() for w in ds.__getitems__(list(range(len(ds))))]  # one batch
    except (ManifestError, ShardNotFoundError) as err:
        return err


def _echo_windows(data: bytes) -> set[str]:
    text = data.decode("utf-8", "replace")
    return {text[i : i + ECHO] for i in range(max(len(text) - ECHO + 1, 0))}


def _check(fixture: Fixture, m: Mutation, outcome: list[bytes] | Exception) -> None:
    if not isinstance(outcome, Exception):
        assert outcome == fixture.windows, f"{m.file} {m.path}: the open read other windows"
        return
    message = str(outcome)
    assert SECRET.decode() not in message
    assert len(message) < 3000, f"{m.file} {m.path}: a message of {len(message)} characters"
    for data in (fixture.files[m.file], m.data, *fixture.files.values()):
        windows = _echo_windows(data)
        assert not any(message[i : i + ECHO] in windows for i in range(len(message) - ECHO + 1)), (
            f"{m.file} {m.path}: the message quotes the file's bytes: {message[:300]}"
        )
    if isinstance(outcome, ShardNotFoundError):
        # A valid table that names another shard in the root (a changed part, index or prefix):
        # the shard is missing, and the error says which.
        assert m.file.startswith("snapshots/tables/") or m.file == "manifest.json", (m, message)
        assert f"{fixture.url}/" in message, message  # a file inside the root
        return
    names = {Path(m.file).name}
    assert any(n in message for n in names) or "manifest.json" in message, (
        f"{m.file} {m.path}: the message names no file: {message}"
    )
    if m.path:
        keys = {str(k) for k in m.path if isinstance(k, str)} | {
            f"{k}_extra" for k in m.path if isinstance(k, str)
        }
        # The field, or a check that compares it by name (a summary against its table).
        related = {"tokens": "summary.tokens", "records": "summary.records", "part": "summary.shards"}
        keys |= {related[k] for k in keys if k in related}
        if "size" in keys:
            keys.add("files")
        assert any(k in message for k in keys) or "sequence" in message, (
            f"{m.file} {m.path}: the message names no field of {keys}: {message}"
        )


def _restore(fixture: Fixture, file: str) -> None:
    fixture.fs.pipe_file(f"{fixture.root}/{file}", fixture.files[file])


def _local_outside(fixture: Fixture, seen: list[str], m: Mutation) -> list[str]:
    root = os.path.realpath(fixture.root)
    base = os.path.dirname(root)
    bad = []
    for p in seen:
        real = os.path.realpath(p) if "\x00" not in p else p
        if real.startswith(base + os.sep) and not (real == root or real.startswith(root + os.sep)):
            bad.append(p)
        elif (
            m.injected
            and (p == m.injected or p.endswith(m.injected.lstrip("/~")))
            and not real.startswith(root)
        ):
            bad.append(p)
    return bad


def _report(test: str, count: int) -> None:
    if COUNT_FILE:
        with builtins.open(COUNT_FILE, "a") as out:
            out.write(f"{test} {count} examples\n")


def test_fuzz_local(local_dataset: Fixture) -> None:
    fixture = local_dataset
    count = 0

    @settings(max_examples=LOCAL_EXAMPLES, deadline=None, database=None)
    @given(mutations(fixture))
    def run(m: Mutation) -> None:
        nonlocal count
        count += 1
        fixture.fs.pipe_file(f"{fixture.root}/{m.file}", m.data)
        try:
            with watch_local_paths() as seen:
                outcome = _open_and_read(fixture, {})
            if m.file.startswith("parts/"):  # not read at open: parsed as a commit would
                try:
                    parse_part_record(m.data, m.file)
                except ManifestError as err:
                    _check(fixture, m, err)
            _check(fixture, m, outcome)
            assert not _local_outside(fixture, seen, m), (m.file, m.path, _local_outside(fixture, seen, m))
        finally:
            _restore(fixture, m.file)

    run()
    _report("local", count)
    assert _open_and_read(fixture, {}) == fixture.windows


@pytest.mark.s3
def test_fuzz_s3(s3_dataset: Fixture, counting_s3) -> None:
    fixture = s3_dataset
    bucket = fixture.root.split("/", 1)[0]
    options = counting_s3.storage_options

    def outside(log) -> list[str]:
        bad = []
        for entry in log:
            split = urllib.parse.urlsplit(entry.path)
            path = urllib.parse.unquote(split.path)
            prefix = urllib.parse.parse_qs(split.query).get("prefix", [""])[0]
            inside = (
                path.startswith(f"/{bucket}/ds/")
                or path == f"/{bucket}/ds"
                or (path.rstrip("/") == f"/{bucket}" and prefix.startswith("ds/"))
            )
            if not inside:
                bad.append(entry.path)
        return bad

    @settings(
        max_examples=S3_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(mutations(fixture))
    def run(m: Mutation) -> None:
        fixture.fs.pipe_file(f"{fixture.root}/{m.file}", m.data)
        try:
            counting_s3.reset()
            outcome = _open_and_read(fixture, options)
            _check(fixture, m, outcome)
            assert not outside(counting_s3.log), (m.file, m.path, outside(counting_s3.log))
        finally:
            _restore(fixture, m.file)

    run()
