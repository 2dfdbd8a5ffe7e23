"""GCS and Azure errors are GuideLoom's, naming the URL and the endpoint, with no credential shown;
credentials are redacted in options and in backend text for every store."""

from __future__ import annotations

import time

import numpy as np
import pytest
from objectstores import AZURE_KEY, azure_connection_string

from guideloom import StreamNumpyFormat, StreamStorage
from guideloom.errors import BucketNotFoundError, StorageAccessError
from guideloom.io.urls import redact_options, redact_secrets

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write(url, options):
    with StreamStorage(url, FMT, storage_options=options).writer() as w:
        w.append({"tokens": [1, 2, 3]})


@pytest.mark.parametrize(
    "store", [pytest.param("gs", marks=pytest.mark.gcs), pytest.param("az", marks=pytest.mark.azure)]
)
def test_a_missing_bucket_or_container_names_it_and_the_endpoint(request, store):
    endpoint = request.getfixturevalue("gcs_endpoint" if store == "gs" else "azure_endpoint")
    url = f"{store}://gl-no-such-bucket-st/ds"
    with pytest.raises(FileNotFoundError) as info:
        _write(url, endpoint.storage_options())
    message = str(info.value)
    word = "container" if store == "az" else "bucket"
    assert url in message and f"the {word} does not exist at the endpoint {endpoint.url}" in message
    assert f"create the {word} first" in message
    if store == "az":
        assert isinstance(info.value, BucketNotFoundError)


@pytest.mark.azure
def test_a_wrong_account_key_keeps_azures_code_and_never_shows_the_key(azure_endpoint, az_container):
    url = f"az://{az_container}/ds"
    _write(url, azure_endpoint.storage_options())
    wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nISE="
    wrong = azure_endpoint.storage_options()["connection_string"].replace(AZURE_KEY, wrong_key)
    with pytest.raises(StorageAccessError) as info:
        _ = StreamStorage(url, FMT, storage_options={"connection_string": wrong}).manifest
    message = str(info.value)
    assert (
        f"reading {url}/manifest.json: access denied by the storage endpoint {azure_endpoint.url}" in message
    )
    assert "(AuthorizationFailure" in message and "check account_key / sas_token" in message
    assert wrong_key not in message and AZURE_KEY not in message


@pytest.mark.parametrize("store", ["gs", "az"])
def test_an_endpoint_that_does_not_answer_is_named_within_the_deadline(store):
    pytest.importorskip("gcsfs" if store == "gs" else "adlfs")
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens
    if store == "gs":
        options = {"endpoint_url": dead, "token": "anon"}
    else:
        options = {"connection_string": azure_connection_string(dead)}
    started = time.monotonic()
    with pytest.raises(StorageAccessError) as info:
        _ = StreamStorage(
            f"{store}://b/ds", FMT, storage_options={**options, "guideloom_deadline_s": 2}
        ).manifest
    assert time.monotonic() - started < 2 + 3
    message = str(info.value)
    assert dead in message and f"{store}://b/ds/manifest.json" in message
    assert AZURE_KEY not in message


def test_credentials_are_redacted_for_every_store():
    options = {
        "key": "AKIAEXAMPLE",
        "secret": "s3-secret",
        "client_kwargs": {"endpoint_url": "http://user:pw@127.0.0.1:9000"},
        "token": "/home/me/service-account.json",  # a path: kept, it holds no secret itself
        "account_name": "acct",
        "account_key": "azure-key==",
        "sas_token": "?sv=2022&sig=abc",
        "connection_string": f"AccountName=a;AccountKey={AZURE_KEY};BlobEndpoint=http://x/a",
    }
    shown = redact_options(options)
    assert shown["token"] == "/home/me/service-account.json" and shown["account_name"] == "acct"
    assert shown["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9000"}
    text = repr(shown)
    for secret in ("AKIAEXAMPLE", "s3-secret", "pw@", "azure-key", "sig=abc", AZURE_KEY):
        assert secret not in text
    assert redact_options({"token": {"type": "service_account", "private_key": "K"}})["token"] == "***"
    # Secrets inside a backend's text.
    text = redact_secrets(
        f"AccountName=a;AccountKey={AZURE_KEY}; https://a.blob.core.windows.net/c/b?sv=1&sig=SIG "
        "https://storage.googleapis.com/b/o?X-Goog-Signature=GSIG&X-Goog-Date=1 "
        "https://b.s3.amazonaws.com/k?X-Amz-Signature=ASIG Authorization: SharedKey acct:SK== "
        '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMII\\n-----END PRIVATE KEY-----\\n"}'
    )
    for secret in (AZURE_KEY, "SIG", "GSIG", "ASIG", "SK==", "MII"):
        assert secret not in text, text
    assert "AccountName=a" in text and "X-Goog-Date=1" in text
