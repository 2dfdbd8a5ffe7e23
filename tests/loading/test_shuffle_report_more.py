"""`guideloom.shuffle_report` on documents, subsets and mixtures, its bad input, and its JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

import guideloom
from guideloom.cli import app
from guideloom.storage import open_view

SEQUENCE_LENGTH = 8  # the windows tests/loading/conftest.py writes
SAMPLE = SEQUENCE_LENGTH * 3  # uint16 tokens + uint8 loss mask


@pytest.fixture
def stream(tmp_path: Any, write_dataset: Callable[..., Any]) -> Any:
    return write_dataset("stream", str(tmp_path / "stream"), {}, size=64)


def test_documents_count_shards_by_records(tmp_path: Any, write_dataset: Callable[..., Any]) -> None:
    docs = write_dataset("documents", str(tmp_path / "docs"), {}, size=64)
    shards = docs.manifest.num_shards
    assert shards > 2
    report = guideloom.shuffle_report(docs, False, 4)
    # in stored order a batch of 4 documents touches one shard, or two where one ends
    assert report.num_samples == 64 and report.shards_per_batch is not None
    assert 1.0 <= report.shards_per_batch < 2.0 and report.shards_random > report.shards_per_batch
    assert report.spearman == 1 and report.displacement == 0
    assert report.shards_ratio == pytest.approx(report.shards_per_batch / report.shards_random)


def test_a_subset_does_not_know_its_shards(stream: Any) -> None:
    view = open_view(stream, SEQUENCE_LENGTH).take(40)
    report = guideloom.shuffle_report(view, True, 4, seed=1)
    assert report.num_samples == 40 and report.shards_per_batch is None and report.shards_ratio is None
    assert "shards / batch   not known (a subset or a mixture)" in str(report)
    figures = report.as_dict()
    assert figures["shards_ratio"] is None and figures["num_samples"] == 40
    assert figures["entropy_ratio"] == pytest.approx(report.entropy / report.entropy_random)


def test_a_read_group_of_one_batch_is_one_group_per_batch(stream: Any) -> None:
    # read_ahead_bytes below one batch: the loader reads batch by batch, so in stored order
    # each batch of 4 consecutive windows is one GET (a shard end splits one in two)
    one = guideloom.shuffle_report(stream, False, 4, sequence_length=SEQUENCE_LENGTH, read_ahead_bytes=SAMPLE)
    batches = 64 // 4
    assert one.group_bytes == 4 * SAMPLE
    assert batches <= one.gets < 2 * batches
    grouped = guideloom.shuffle_report(stream, False, 4, sequence_length=SEQUENCE_LENGTH)
    assert grouped.gets < one.gets and grouped.bytes == one.bytes == batches * 4 * SAMPLE


def test_bad_input_is_named(stream: Any, tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="unknown settings \\['shuffle_blocks'\\]; known: \\["):
        guideloom.shuffle_report(stream, "block", 4, sequence_length=SEQUENCE_LENGTH, shuffle_blocks=3)
    with pytest.raises(ValueError, match="batch_size, world_size and regions must be positive"):
        guideloom.shuffle_report(stream, "block", 0, sequence_length=SEQUENCE_LENGTH)
    with pytest.raises(ValueError, match="regions must be positive"):
        guideloom.shuffle_report(stream, "block", 4, sequence_length=SEQUENCE_LENGTH, regions=0)
    with pytest.raises(ValueError, match="has 64 samples: fewer than two global batches of 64"):
        guideloom.shuffle_report(stream, "block", 16, 4, sequence_length=SEQUENCE_LENGTH)
    other = guideloom.open(str(tmp_path / "stream"))
    mixture = guideloom.Mixture([(stream, 0.5), (other, 0.5)]).dataset(SEQUENCE_LENGTH)
    with pytest.raises(ValueError, match="report a mixture's sources one by one"):
        guideloom.shuffle_report(mixture, "block", 4)


def test_the_command_line_prints_json_and_names_a_bad_shuffle(stream: Any) -> None:
    args = ["shuffle-report", stream.url, "--sequence-length", str(SEQUENCE_LENGTH), "--batch-size", "4"]
    out = CliRunner().invoke(app, [*args, "--shuffle", "full", "--seed", "2", "--json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.output)
    assert figures["mode"] == "full" and figures["full_shuffle"] and figures["num_samples"] == 64
    direct = guideloom.shuffle_report(stream, "full", 4, sequence_length=SEQUENCE_LENGTH, seed=2)
    assert figures["gets"] == direct.gets and figures["entropy"] == pytest.approx(direct.entropy)
    bad = CliRunner().invoke(app, [*args, "--shuffle", "random"])
    assert bad.exit_code == 2 and "--shuffle 'random': one of none, block, full" in bad.output
