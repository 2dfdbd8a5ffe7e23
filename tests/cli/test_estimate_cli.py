"""`guideloom estimate`: the requests, bytes and price of planned epochs, from the manifest alone
(the Python `guideloom.estimate` is checked against a real store's counts in
tests/io/test_io_stats.py)."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from guideloom import DocumentJsonFormat, DocumentStorage, StreamNumpyFormat, StreamStorage, estimate
from guideloom.cli import app

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _stream(path):
    storage = StreamStorage(path, FMT)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=20_000) as w:
        for n in rng.integers(100, 900, 80):
            w.append({"tokens": rng.integers(0, 60000, n).astype(np.uint16)})
    return storage


def test_the_table_and_the_price_are_the_estimates(tmp_path):
    storage = _stream(tmp_path / "ds")
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"s3": {"get_per_1000": 2.0, "egress_per_gb": 0}}))
    args = ["estimate", storage.url, "--sequence-length", "128", "--batch-size", "8", "--shuffle", "full"]
    result = CliRunner().invoke(app, [*args, "--world-size", "2", "--epochs", "2", "--prices", str(prices)])
    assert result.exit_code == 0, result.output
    want = estimate(storage, sequence_length=128, batch_size=8, shuffle=True, world_size=2, epochs=2)
    last = [line for line in result.output.splitlines() if line.strip().startswith("all")][0].split()
    assert [int(x.replace(",", "")) for x in last[1:]] == [want.windows, want.requests, want.bytes]
    assert f"price: ${want.requests / 1000 * 2.0:,.2f} (--prices {prices}" in result.output
    # The list prices, said to be list prices of a date.
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "s3 list prices of 2026-12" in result.output


def test_bad_settings_are_named(tmp_path):
    storage = _stream(tmp_path / "ds")
    base = ["estimate", storage.url, "--sequence-length", "128"]
    result = CliRunner().invoke(app, [*base, "--shuffle", "random"])
    assert result.exit_code == 2 and "--shuffle 'random': one of off, block, full" in result.output
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"s3": {"get": 1}}))
    result = CliRunner().invoke(app, [*base, "--prices", str(bad)])
    assert result.exit_code == 2 and "get_per_1000" in result.output and "for example" in result.output
    result = CliRunner().invoke(app, [*base, "--provider", "r2"])
    assert result.exit_code == 2 and "no prices for provider 'r2'" in result.output
    negative = tmp_path / "negative.yaml"
    negative.write_text("s3:\n  get_per_1000: -0.4\n  egress_per_gb: 0\n")
    result = CliRunner().invoke(app, [*base, "--prices", str(negative)])
    assert (
        result.exit_code == 2 and "provider 's3' has a negative price (get_per_1000: -0.4)" in result.output
    )
    typo = tmp_path / "typo.yaml"
    typo.write_text("gcp:\n  get_per_1000: 0.4\n  egress_per_gb: 0.12\n")
    result = CliRunner().invoke(app, [*base, "--prices", str(typo)])
    assert (
        result.exit_code == 2
        and "names provider 'gcp'" in result.output
        and "--provider gcp" in result.output
    )
    result = CliRunner().invoke(
        app, [*base, "--prices", str(typo), "--provider", "gcp"]
    )  # the fix, as written
    assert result.exit_code == 0 and "price: $" in result.output, result.output
    result = CliRunner().invoke(app, ["estimate", storage.url])
    assert result.exit_code == 2 and "is a stream: give sequence_length=" in result.output
    result = CliRunner().invoke(app, [*base, "--num-workers", "-1"])
    assert result.exit_code == 2 and "num_workers must be an int >= 0, got -1" in result.output


def test_documents_need_no_sequence_length_and_count_their_index_pages(tmp_path):
    docs = DocumentStorage(tmp_path / "docs", DocumentJsonFormat())
    with docs.writer(shard_size=4_000) as w:
        for k in range(300):
            w.append({"id": k, "text": "y" * (k % 97)})
    args = ["estimate", docs.url, "--batch-size", "4", "--shuffle", "full", "--epochs", "2"]
    for workers in (0, 2):
        result = CliRunner().invoke(app, [*args, "--num-workers", str(workers)])
        assert result.exit_code == 0, result.output
        assert result.output.split()[1] == "documents"
        want = estimate(docs, batch_size=4, shuffle=True, epochs=2, num_workers=workers)
        last = [line for line in result.output.splitlines() if line.strip().startswith("all")][0].split()
        assert [int(x.replace(",", "")) for x in last[1:]] == [want.windows, want.requests, want.bytes]
        assert want.windows == 600 and want.requests > 0
