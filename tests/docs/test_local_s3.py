"""docs/local-s3.md's promises: the AWS SDK variables alone reach a local S3, and the endpoint
file of scripts/s3/start-rgw.sh, once sourced, hands them to the programs a shell starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docs_helpers import REPO, subprocess_env

START_RGW = REPO / "scripts" / "s3" / "start-rgw.sh"


def _aws_env(endpoint: object) -> dict[str, str]:
    env = subprocess_env(
        AWS_ENDPOINT_URL=endpoint.url,  # type: ignore[attr-defined]
        AWS_ACCESS_KEY_ID=endpoint.key,  # type: ignore[attr-defined]
        AWS_SECRET_ACCESS_KEY=endpoint.secret,  # type: ignore[attr-defined]
        AWS_DEFAULT_REGION="us-east-1",
    )
    for name in [n for n in env if n.startswith("FSSPEC_S3") or n == "GUIDELOOM_TEST_S3_ENDPOINT"]:
        del env[name]  # only the AWS SDK's names may carry the endpoint here
    return env


@pytest.mark.s3
def test_s3fs_honours_aws_endpoint_url(s3_endpoint: object, s3_bucket: str) -> None:
    # A plain s3fs filesystem, no options: the endpoint and keys come from the environment.
    code = (
        "import fsspec, s3fs\n"
        f"fs = fsspec.filesystem('s3')\n"
        f"fs.pipe_file('{s3_bucket}/probe.bin', b'0123456789')\n"
        f"print(s3fs.__version__, fs.cat_file('{s3_bucket}/probe.bin', start=2, end=5))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=_aws_env(s3_endpoint), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1] == "b'234'"


@pytest.mark.s3
def test_cli_reaches_the_endpoint_from_the_environment(s3_endpoint: object, s3_bucket: str) -> None:
    import numpy as np

    from guideloom import StreamNumpyFormat, StreamStorage

    url = f"s3://{s3_bucket}/env-ds"
    storage = StreamStorage(
        url,
        StreamNumpyFormat({"tokens": np.uint16}),
        storage_options=s3_endpoint.storage_options(),  # type: ignore[attr-defined]
    )
    with storage.writer() as writer:
        writer.append({"tokens": np.arange(7)})
    out = subprocess.run(
        [sys.executable, "-m", "guideloom.cli", "inspect", url, "--json"],
        env=_aws_env(s3_endpoint),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert '"tokens": 7' in out.stdout


def test_rgw_endpoint_file_exports_its_variables(tmp_path: Path) -> None:
    # The endpoint file exactly as start-rgw.sh writes it (its here-document), for a made-up port.
    script = START_RGW.read_text(encoding="utf-8")
    body = re.search(r'cat > "\$DIR/endpoint.env" <<ENV\n(.*?)\nENV\n', script, re.S)
    assert body, "start-rgw.sh no longer writes endpoint.env with a here-document"
    text = body[1].replace("$RGW_PORT", "7480").replace("$ACCESS_KEY", "k").replace("$SECRET_KEY", "s")
    text = text.replace("\\${", "${")
    env_file = tmp_path / "endpoint.env"
    env_file.write_text(text + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    probe = "import os; print(os.environ['AWS_ENDPOINT_URL'], os.environ['AWS_ACCESS_KEY_ID'])"
    out = subprocess.run(
        ["bash", "-c", f'. "{env_file}" && "{sys.executable}" -c "{probe}"'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["http://127.0.0.1:7480", "k"]
