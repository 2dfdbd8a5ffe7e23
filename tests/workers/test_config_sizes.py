"""A job file takes sizes as the flags do: `shard_size: 2MiB` is 2 MiB, a bad size is named."""

from __future__ import annotations

import pytest

from guideloom.errors import IngestError
from guideloom.workers.config import load_job_file


def test_a_job_file_takes_sizes_with_units(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("inputs: [a.jsonl]\noutput: out\nshard_size: 2MiB\npart_size: 1GB\n")
    config = load_job_file(job)
    assert config.shard_size == 2 * 2**20 and config.part_size == 10**9


def test_a_bad_size_in_a_job_file_is_named_with_the_form_to_use(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("inputs: [a.jsonl]\noutput: out\nshard_size: 2 lots\n")
    with pytest.raises(IngestError) as caught:
        load_job_file(job)
    assert "shard_size" in str(caught.value) and "use e.g. 1048576, 64MiB or 1GB" in str(caught.value)
