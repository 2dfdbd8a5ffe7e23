"""Unknown protocols, missing buckets and wrong credentials fail clearly and leak no secret."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
from guideloom.errors import GuideLoomError, StorageAccessError, UnknownProtocolError
from guideloom.io import redact_url

FMT = StreamNumpyFormat({"tokens": np.uint16})


def test_unknown_protocol():
    with pytest.raises(UnknownProtocolError, match=r"nosuch://bucket/x: unknown protocol"):
        StreamStorage("nosuch://bucket/x", FMT)


@pytest.mark.parametrize(
    ("url", "module", "extra"),
    [("s3://b/x", "s3fs", "s3"), ("gs://b/x", "gcsfs", "gcs"), ("az://c/x", "adlfs", "azure")],
)
def test_a_store_whose_extra_is_missing_names_the_extra_to_install(url, module, extra):
    import subprocess
    import sys

    code = (
        f"import sys; sys.modules[{module!r}] = None  # as if it were not installed\n"
        "import numpy as np\n"
        "from guideloom import StreamNumpyFormat, StreamStorage\n"
        f"StreamStorage({url!r}, StreamNumpyFormat({{'tokens': np.uint16}}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"UnknownProtocolError: {url}: the package for this protocol is not installed" in done.stderr
    assert f"install guideloom[{extra}] ({module}): pip install 'guideloom[{extra}]'" in done.stderr


def test_redact_url_drops_credentials():
    assert redact_url("s3://AKIA:supersecret@bucket/x?token=abc") == "s3://bucket/x"
    assert redact_url("/local/path") == "/local/path"


@pytest.mark.s3
def test_missing_bucket_for_reading_and_writing(s3_options):
    storage = StreamStorage("s3://gl-no-such-bucket-xyz/ds", FMT, storage_options=s3_options)
    assert not storage.exists()
    with pytest.raises(FileNotFoundError, match="no dataset at s3://gl-no-such-bucket-xyz/ds"):
        StreamDataset(storage, 4)
    with pytest.raises((GuideLoomError, OSError)) as info:
        with storage.writer() as w:
            w.append({"tokens": [1, 2, 3]})
    assert "gl-no-such-bucket-xyz" in str(info.value)
    assert "create the bucket first" in str(info.value)


@pytest.mark.s3
def test_wrong_credentials_never_show_the_secret(s3_endpoint, s3_bucket, s3_options):
    if s3_endpoint.backend == "moto":
        pytest.skip("moto's server does not check signatures; RGW and MinIO do")
    secret = "this-is-the-wrong-secret-1234"
    bad = {**s3_options, "secret": secret, "skip_instance_cache": True}
    with pytest.raises(StorageAccessError) as info:
        StreamStorage(f"s3://{s3_bucket}/ds", FMT, storage_options=bad)
    message = str(info.value)
    assert "credentials" in message and f"s3://{s3_bucket}/ds" in message
    assert secret not in message and s3_options["secret"] not in message
    chained = info.value.__cause__
    while chained is not None:
        assert secret not in str(chained)
        chained = chained.__cause__


def test_unreachable_endpoint_names_it():
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        "skip_instance_cache": True,
    }
    with pytest.raises(
        StorageAccessError, match=r"could not connect to the storage endpoint http://127.0.0.1:9"
    ):
        StreamStorage("s3://some-bucket/ds", FMT, storage_options=options)


def _local_dataset(root):
    storage = StreamStorage(str(root / "ds"), FMT)
    with storage.writer() as w:
        w.append({"tokens": np.arange(10)})
    return root / "ds"


def test_a_local_path_is_never_blamed_on_the_s3_endpoint(tmp_path, monkeypatch):
    """issue 24 item 4: `inspect DIR/manifest.json` named AWS_ENDPOINT_URL's endpoint and
    "overloaded" for a local path. It names the file and the folder to use instead."""
    from guideloom.errors import DatasetNotFoundError

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    folder = _local_dataset(tmp_path)
    with pytest.raises(DatasetNotFoundError) as info:
        StreamDataset(StreamStorage(str(folder / "manifest.json"), FMT), 4)
    message = str(info.value)
    assert "127.0.0.1:9" not in message and "endpoint" not in message and "overloaded" not in message
    assert f"{folder}/manifest.json is a file, not a directory" in message  # the cause
    assert f"use {folder}" in message  # the fix, which works:
    fixed = message.rsplit("use ", 1)[1]
    assert len(StreamDataset(StreamStorage(fixed, FMT), 4)) == 2


def test_inspect_of_a_manifest_file_says_which_folder_to_use(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from guideloom.cli import app

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    folder = _local_dataset(tmp_path)
    result = CliRunner().invoke(app, ["inspect", str(folder / "manifest.json")])
    assert result.exit_code != 0
    assert "is a file, not a directory" in result.output and f"use {folder}" in result.output
    assert "127.0.0.1:9" not in result.output
    assert CliRunner().invoke(app, ["inspect", str(folder)]).exit_code == 0


def test_a_local_permission_error_points_at_the_file_not_credentials(tmp_path):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads every file whatever its mode")
    folder = _local_dataset(tmp_path)
    (folder / "manifest.json").chmod(0)
    with pytest.raises(StorageAccessError) as info:
        StreamDataset(StreamStorage(str(folder), FMT), 4)
    message = str(info.value)
    assert "local file system refused" in message and "permissions" in message
    assert "AWS" not in message and "credentials" not in message


@pytest.mark.s3
def test_a_secret_alone_is_a_credentials_error_with_the_fix(s3_endpoint, s3_bucket, s3_options):
    """issue 24 item 4: storage_options={"secret": ...} alone (PartialCredentialsError) said
    "overloaded". It says the credentials are incomplete and how to give them; the fix runs."""
    url = f"s3://{s3_bucket}/ds"
    with StreamStorage(url, FMT, storage_options=s3_options).writer() as w:
        w.append({"tokens": [1, 2]})
    partial = {"secret": s3_options["secret"], "client_kwargs": s3_options["client_kwargs"]}
    partial["skip_instance_cache"] = True
    import os

    env = {k: os.environ.pop(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in os.environ}
    try:
        with pytest.raises(StorageAccessError) as info:
            StreamStorage(url, FMT, storage_options=partial)
    finally:
        os.environ.update(env)
    message = str(info.value)
    assert "overloaded" not in message
    assert "the credentials are incomplete (PartialCredentialsError" in message  # the cause
    assert "aws_access_key_id" in message and s3_options["secret"] not in message
    assert "storage_options={'key': ..., 'secret': ...}" in message  # the fix:
    assert StreamStorage(url, FMT, storage_options={**partial, "key": s3_options["key"]}).manifest


@pytest.mark.s3
@pytest.mark.parametrize("code", ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied"])
@pytest.mark.parametrize("message", ["", "The request signature we calculated does not match"])
def test_a_refused_request_keeps_the_stores_code(s3_bucket, s3_options, fault_s3, code, message):
    """issue 24 item 5: a wrong secret gave `access denied (PermissionError: None)`. The store's
    code stays in the message, with what to check for that code, whether or not the server sent
    a <Message> (RGW sends none); docs/errors.md promises it."""
    from faultproxy import Fault

    url = f"s3://{s3_bucket}/ds"
    fault_s3.add(Fault("status", r"manifest\.json", status=403, code=code, message=message))
    with pytest.raises(StorageAccessError) as info:
        StreamStorage(url, FMT, storage_options=fault_s3.storage_options)
    text = str(info.value)
    assert f"reading {url}/manifest.json" in text and fault_s3.url in text
    assert f"({code}" in text and "None" not in text
    fix = {"SignatureDoesNotMatch": "Check the secret", "InvalidAccessKeyId": "check the key"}
    assert fix.get(code, "policy") in text
