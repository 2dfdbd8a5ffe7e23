"""The four findings of issue 32, each as a test: the snapshot format keeps the manifest's promises.

1. Totals that do not add up are refused, by the API and every command.
2. A table piece's path cannot leave the dataset root, and no file's bytes reach a message.
3. After a kill between the log entry and its ``manifest.json`` copy, every command opens the
   dataset as the API does.
4. Messages blame the right thing: the field and the file; "upgrade" only for a later version;
   a record re-serialized with other whitespace opens.

Set-up and tampering go through plain files (or fsspec on S3), never through the code under test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest
from typer.testing import CliRunner

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.cli import app
from guideloom.errors import ManifestError

FMT = StreamNumpyFormat({"tokens": np.uint16})
SECRET = b"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY\n"


def _write(url: str, options: dict | None = None, appends: int = 1) -> StreamStorage:
    storage = StreamStorage(url, FMT, storage_options=options)
    with storage.writer(shard_size=64) as w:
        for i in range(20):
            w.append({"tokens": np.arange(i, i + 250, dtype=np.uint16)})
    for k in range(appends):
        with storage.writer(append=True, shard_size=64) as w:
            w.append({"tokens": np.arange(k, k + 100, dtype=np.uint16)})
    return storage


def _windows(url: str, options: dict | None = None) -> list[list[int]]:
    ds = StreamDataset(StreamStorage(url, FMT, storage_options=options), sequence_length=50)
    return [ds[i]["tokens"].tolist() for i in range(len(ds))]


def _edit(fs, path: str, change) -> None:
    """Rewrite the JSON file at ``path`` (compact, as GuideLoom writes it) after ``change``."""
    raw = json.loads(fs.cat_file(path))
    change(raw)
    fs.pipe_file(path, json.dumps(raw, separators=(",", ":")).encode())


def _current_log(root: Path) -> Path:
    return sorted((root / "snapshots" / "log").glob("*.json"))[-1]


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def local(tmp_path):
    root = tmp_path / "ds"
    _write(str(root))
    return root


# -- 1. totals --------------------------------------------------------------------------------


def test_totals_that_do_not_add_up_are_refused_everywhere(local):
    fs = fsspec.filesystem("file")

    def inflate(raw):
        raw["summary"]["tokens"] += 1

    _edit(fs, str(_current_log(local)), inflate)
    _edit(fs, str(local / "manifest.json"), inflate)
    with pytest.raises(ManifestError) as err:
        _ = StreamStorage(str(local), FMT).manifest
    assert "summary.tokens" in str(err.value) and _current_log(local).name in str(err.value)
    for command in ("inspect", "verify", "log"):
        out = _cli(command, str(local))
        assert out.exit_code == 2, (command, out.output)
        assert "summary.tokens" in out.output


# -- 2. paths out of the root, and echoed bytes -----------------------------------------------


def _piece_path_to(target: str):
    def change(raw):
        raw["pieces"][0]["path"] = target

    return change


@pytest.mark.parametrize("target", ["victim", "secret"])
def test_a_piece_path_cannot_leave_the_root_and_no_bytes_are_echoed(tmp_path, local, target, monkeypatch):
    victim = tmp_path / "victim"
    _write(str(victim), appends=0)
    (tmp_path / "secret.txt").write_bytes(SECRET)
    victim_piece = next((victim / "snapshots" / "tables").glob("*.json")).name
    path = f"../victim/snapshots/tables/{victim_piece}" if target == "victim" else "../secret.txt"
    fs = fsspec.filesystem("file")
    for f in (_current_log(local), local / "manifest.json"):
        _edit(fs, str(f), _piece_path_to(path))
    opened: list[str] = []
    real_open = open

    def watching_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watching_open)
    with pytest.raises(ManifestError) as err:
        _ = StreamStorage(str(local), FMT).manifest
    out = _cli("verify", str(local))
    monkeypatch.undo()
    message = str(err.value)
    assert "pieces.0.path" in message and "manifest.json" in message  # the copy is read first
    assert b"AWS_SECRET" not in message.encode() and "AWS_SECRET" not in out.output
    assert out.exit_code == 2 and "pieces.0.path" in out.output
    assert not [p for p in opened if "victim" in p or "secret" in p]


@pytest.mark.s3
def test_a_piece_path_cannot_leave_the_root_on_s3(s3_bucket, s3_options, counting_s3):
    base = f"{s3_bucket}"
    _write(f"s3://{base}/ds", s3_options)
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_options)
    fs.pipe_file(f"{base}/secret.txt", SECRET)
    log = sorted(fs.ls(f"{base}/ds/snapshots/log"))[-1]
    for f in (log, f"{base}/ds/manifest.json"):
        _edit(fs, f, _piece_path_to("../secret.txt"))
    counting_s3.reset()
    with pytest.raises(ManifestError) as err:
        _ = StreamStorage(f"s3://{base}/ds", FMT, storage_options=counting_s3.storage_options).manifest
    assert "pieces.0.path" in str(err.value) and "AWS_SECRET" not in str(err.value)
    assert all(e.path.split("?")[0].startswith(f"/{base}/ds/") for e in counting_s3.log), counting_s3.log


# -- 3. a kill between the log entry and its copy ---------------------------------------------


@pytest.mark.parametrize("copy", ["missing", "empty"])
def test_every_command_opens_a_dataset_whose_copy_was_not_written(tmp_path, copy):
    root = tmp_path / "ds"
    _write(str(root), appends=0)  # a first commit: manifest.json is only ever its copy
    expected = _windows(str(root))
    if copy == "missing":
        (root / "manifest.json").unlink()
    else:
        (root / "manifest.json").write_bytes(b"")
    assert _windows(str(root)) == expected
    for command in ("inspect", "verify", "log"):
        out = _cli(command, str(root))
        assert out.exit_code == 0, (command, out.output)
    assert "tokens" in _cli("inspect", "--json", str(root)).output
    out = _cli("estimate", str(root), "--sequence-length", "50", "--batch-size", "2")
    assert out.exit_code == 0, out.output


# -- 4. messages that blame the right thing ---------------------------------------------------


def test_an_invalid_value_names_its_field_and_file_and_is_no_reason_to_upgrade(local):
    fs = fsspec.filesystem("file")

    def negative(raw):
        raw["summary"]["tokens"] = -5

    _edit(fs, str(_current_log(local)), negative)
    _edit(fs, str(local / "manifest.json"), negative)
    with pytest.raises(ManifestError) as err:
        _ = StreamStorage(str(local), FMT).manifest
    message = str(err.value)
    assert "summary.tokens" in message and "manifest.json" in message
    assert "pgrade" not in message


def test_a_later_version_asks_for_an_upgrade(local):
    def later(raw):
        raw["version"] = "snapshots-2"

    _edit(fsspec.filesystem("file"), str(local / "manifest.json"), later)
    with pytest.raises(ManifestError, match="Upgrade guideloom"):
        _ = StreamStorage(str(local), FMT).manifest


def test_a_record_reserialized_with_whitespace_opens(local):
    expected = _windows(str(local))
    for f in [local / "manifest.json", *(local / "snapshots").rglob("*.json")]:
        f.write_text(json.dumps(json.loads(f.read_bytes()), indent=2) + "\n")
    assert _windows(str(local)) == expected
    assert _cli("inspect", str(local)).exit_code == 0
    assert _cli("log", str(local)).exit_code == 0


def test_inflated_counts_in_a_piece_name_the_piece(local):
    """The piece's tokens and the record's summary agree, the data file's size does not: the
    message names the piece, not manifest.json."""
    piece = json.loads(_current_log(local).read_bytes())["pieces"][-1]["path"]
    fs = fsspec.filesystem("file")

    def inflate_piece(raw):
        raw["tokens"][0] += 3

    def inflate_summary(raw):
        raw["summary"]["tokens"] += 3

    _edit(fs, str(local / piece), inflate_piece)
    _edit(fs, str(_current_log(local)), inflate_summary)
    _edit(fs, str(local / "manifest.json"), inflate_summary)
    with pytest.raises(ManifestError) as err:
        _ = StreamStorage(str(local), FMT).manifest
    assert Path(piece).name in str(err.value) and "restore it" not in str(err.value)
    shutil.rmtree(local)


def test_verify_checks_the_pieces_bytes_that_an_open_does_not(local):
    """A piece edited into another valid table (a shard's checksum changed) still opens; `verify`
    names the piece (no longer named by its content) and the shard."""
    piece = json.loads(_current_log(local).read_bytes())["pieces"][0]["path"]

    def other_checksum(raw):
        raw["files"]["data"]["checksum"][0] = "xxh3_64:" + "0" * 16

    _edit(fsspec.filesystem("file"), str(local / piece), other_checksum)
    assert _windows(str(local))
    out = _cli("verify", str(local))
    assert out.exit_code == 1, out.output
    assert f"{Path(piece).name} is not named by its content" in out.output
