"""A missing bucket in an ingestion (input or output) names the bucket and the endpoint, before
Ray starts (issue 24: "the ingestion's bucket-not-found error omits the endpoint")."""

from __future__ import annotations

import pytest

from guideloom.errors import IngestError
from guideloom.workers.config import IngestConfig
from guideloom.workers.output import check_writable
from guideloom.workers.sources import expand_inputs

pytestmark = pytest.mark.s3


@pytest.mark.parametrize(
    "pattern", ["s3://gl-no-such-input/raw/*.jsonl", "s3://gl-no-such-input/raw/a.jsonl"]
)
def test_a_missing_input_bucket_names_the_endpoint(s3_endpoint, s3_options, pattern):
    with pytest.raises(IngestError) as info:
        expand_inputs([pattern], "auto", {**s3_options, "skip_instance_cache": True})
    message = str(info.value)
    assert pattern in message and "'gl-no-such-input' does not exist" in message  # the cause
    assert f"at the endpoint {s3_endpoint.url}" in message
    assert "endpoint_url" in message  # where to fix it


def test_a_missing_output_bucket_names_the_endpoint(s3_endpoint, s3_options):
    out = "s3://gl-no-such-output/ds"
    config = IngestConfig(inputs=["unused.jsonl"], output=out, storage_options=s3_options)
    with pytest.raises(IngestError) as info:
        check_writable(config, out)
    message = str(info.value)
    assert message.startswith(f"cannot write to the output {out}: writing {out}/")
    assert f"the bucket does not exist at the endpoint {s3_endpoint.url}" in message
    assert "create the bucket first" in message
    assert message.count("check") == 1  # one fix, not two
