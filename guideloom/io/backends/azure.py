"""Azure Blob Storage (``az://``, ``abfs://``, ``abfss://``, ``adl://``) through adlfs.

Ranged GETs report the blob's size (the SDK parses ``Content-Range``), and the SDK's own retry
waits are shortened (`AZURE_BACKOFF`): GuideLoom retries transient answers itself, within its
deadline.
"""

from __future__ import annotations

import errno
import os
from typing import Any, ClassVar

from guideloom.io.backends.base import Backend, RangedGet
from guideloom.io.s3 import sized_body
from guideloom.io.urls import redact_url

__all__ = ["AZURE_BACKOFF", "AzureBackend", "azure_ranged_get", "quicken_azure_retries"]

# The Azure SDK's own retry waits 15 s + 3**n (+-3 s) before its n-th retry (``ExponentialRetry``'s
# defaults): one 503 stalls a read for 15-21 s, which alone can pass GuideLoom's I/O deadline
# and starves a training step. GuideLoom retries transient answers itself, within the deadline,
# so the SDK's attempts are made short: 1.5**n s, +-0.5 s (3 retries, under 9 s in all).
AZURE_BACKOFF = {"initial_backoff": 0, "increment_base": 1.5, "random_jitter_range": 0.5}


class AzureBackend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("az", "abfs", "abfss", "adl")
    key: ClassVar[str | None] = "azure"
    display_name: ClassVar[str] = "Azure Blob"
    bucket_word: ClassVar[str] = "container"
    extra: ClassVar[tuple[str, str] | None] = ("azure", "adlfs")
    endpoint_options: ClassVar[str | None] = (
        "storage_options account_name or connection_string, AZURE_STORAGE_CONNECTION_STRING"
    )
    generic_hint: ClassVar[str | None] = (
        "Check the credentials (storage_options account_name with account_key, "
        "sas_token or credential; or connection_string), and that the container exists and you "
        "may use it"
    )
    throttle_spread: ClassVar[str | None] = (
        "an Azure storage account has a request-rate target: spread the data over more "
        "accounts, or ask for a higher limit"
    )

    # Hot tier read operations
    list_prices: ClassVar[dict[str, float] | None] = {"get_per_1000": 0.00044, "egress_per_gb": 0.087}
    access_hints: ClassVar[dict[str, str]] = {
        "AuthorizationPermissionMismatch": (
            "The credentials may not do this: give the identity a role that allows it on this container"
        ),
        "AuthorizationFailure": (
            "The account key or SAS token was refused: check account_key / sas_token (or the "
            "connection string's AccountKey) and that it belongs to this account"
        ),
        "AuthenticationFailed": (
            "The account key or SAS token was refused: check account_key / sas_token (or the "
            "connection string) and that it has not expired"
        ),
    }

    def prepare(self, fs: Any) -> None:
        quicken_azure_retries(fs)

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        client = getattr(fs, "service_client", None)
        found = getattr(client, "url", None) or getattr(fs, "account_url", None)
        conn = options.get("connection_string") or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if not found and conn:
            fields = dict(p.split("=", 1) for p in str(conn).split(";") if "=" in p)
            found = fields.get("BlobEndpoint")
            if not found and fields.get("AccountName"):
                suffix = fields.get("EndpointSuffix", "core.windows.net")
                found = f"https://{fields['AccountName']}.blob.{suffix}"
        account = options.get("account_name") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not found and account:
            found = f"https://{account}.blob.core.windows.net"
        if not found:
            return "the Azure default endpoint (no account given)"
        return redact_url(str(found).split("?", 1)[0])  # never a SAS token appended to the URL

    def sized_ranged_get(self) -> RangedGet | None:
        return azure_ranged_get


async def azure_ranged_get(fs: Any, path: str, start: int, end: int) -> tuple[bytes, int | None]:
    """Bytes ``[start, end)`` of an Azure blob and its size, from one GET (adlfs's client)."""
    from azure.core.exceptions import ResourceNotFoundError

    container, blob, version_id = fs.split_path(fs._strip_protocol(path))
    async with fs.service_client.get_blob_client(container=container, blob=blob) as client:
        try:
            stream = await client.download_blob(
                offset=start, length=end - start, version_id=version_id, max_concurrency=1
            )
        except ResourceNotFoundError as err:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path) from err
        data = await stream.readall()
    return sized_body(data, getattr(stream.properties, "content_range", None), path)


def quicken_azure_retries(fs: Any) -> None:
    """Shorten the backoff of adlfs's blob client (``fs.service_client``) to `AZURE_BACKOFF`.

    adlfs builds the client without passing a retry policy through, so the policy the client
    already holds (shared by every blob client it hands out) gets the shorter waits. A client
    without one (another SDK layout) is left as it is."""
    clients = getattr(fs, "service_client", None)
    for client in clients if isinstance(clients, list) else [clients]:
        policy = getattr(getattr(client, "_config", None), "retry_policy", None)
        if policy is not None and all(hasattr(policy, name) for name in AZURE_BACKOFF):
            for name, value in AZURE_BACKOFF.items():
                setattr(policy, name, value)
