"""Planning on S3 lists inputs in bulk and looks files up concurrently (counted at the S3 proxy)."""

from __future__ import annotations

import io

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs

pytestmark = pytest.mark.s3

FILES = 40


@pytest.fixture
def s3_inputs(s3_bucket, s3_options):
    """40 JSONL files and 8 Parquet files, written with raw fsspec."""
    fs = fsspec.filesystem("s3", **s3_options)
    for i in range(FILES):
        fs.pipe_file(f"{s3_bucket}/in/f{i:03d}.jsonl", b'{"text": "x"}\n' * (i + 1))
    for i in range(8):
        buf = io.BytesIO()
        pq.write_table(pa.table({"text": [f"doc {j}" for j in range(100)]}), buf, row_group_size=10)
        fs.pipe_file(f"{s3_bucket}/pq/p{i}.parquet", buf.getvalue())
    return s3_bucket


def test_a_glob_costs_listings_only(s3_inputs, counting_s3):
    counting_s3.reset()
    files = expand_inputs([f"s3://{s3_inputs}/in/*.jsonl"], "auto", counting_s3.storage_options)
    assert [f.size for f in files] == [14 * (i + 1) for i in range(FILES)]
    assert counting_s3.requests["HEAD"] == 0  # sizes come from the listing
    assert counting_s3.request_count <= 3


def test_an_explicit_file_list_is_looked_up_concurrently(s3_inputs, counting_s3):
    urls = [f"s3://{s3_inputs}/in/f{i:03d}.jsonl" for i in range(FILES)]
    counting_s3.delay_s = 0.05
    counting_s3.reset()
    files = expand_inputs(urls, "auto", counting_s3.storage_options)
    assert [f.url for f in files] == sorted(urls)
    assert counting_s3.request_count <= FILES + 2  # one lookup per file, no LIST + 2 HEADs each
    assert counting_s3.max_in_flight >= 4, counting_s3.max_in_flight


def test_parquet_footers_are_read_concurrently(s3_inputs, counting_s3):
    files = expand_inputs([f"s3://{s3_inputs}/pq/"], "auto", counting_s3.storage_options)
    assert len(files) == 8
    counting_s3.delay_s = 0.05
    counting_s3.reset()
    plan = plan_parts(files, part_size=1, text_per_line=False, storage_options=counting_s3.storage_options)
    assert len(plan.parts) == 8 * 10  # one part per row group
    assert counting_s3.max_in_flight >= 4, counting_s3.max_in_flight
    assert counting_s3.requests["GET"] <= 8 * 3  # a footer takes a few ranged reads
