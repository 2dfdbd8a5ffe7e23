"""Amazon S3 and S3-compatible stores (Ceph RGW, MinIO, moto): ``s3://``, ``s3a://``.

The client pieces (the shared session, the connection pool, the ranged GETs that report the
object's size, the throttling hook) live in `guideloom.io.s3`; this module says when to use them.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from guideloom.io import s3
from guideloom.io.backends.base import Backend, RangedGet
from guideloom.io.urls import redact_url

__all__ = ["S3Backend"]


class S3Backend(Backend):
    protocols: ClassVar[tuple[str, ...]] = ("s3", "s3a")
    key: ClassVar[str | None] = "s3"
    display_name: ClassVar[str] = "S3"
    extra: ClassVar[tuple[str, str] | None] = ("s3", "s3fs")
    endpoint_options: ClassVar[str | None] = (
        "storage_options endpoint_url or client_kwargs.endpoint_url, FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL"
    )
    generic_hint: ClassVar[str | None] = (
        "Check the credentials (storage_options key/secret or the AWS_* environment "
        "variables), the endpoint_url, and that the bucket exists and you may use it"
    )
    throttle_spread: ClassVar[str | None] = (
        "S3 scales each partitioned prefix to about 5,500 GETs per second: spread the data "
        "over more prefixes (e.g. one dataset per prefix rather than many readers on one), or ask "
        "AWS to partition the prefix"
    )
    # Standard, us-east-1
    list_prices: ClassVar[dict[str, float] | None] = {"get_per_1000": 0.0004, "egress_per_gb": 0.09}
    missing_costs_list: ClassVar[bool] = True
    forbidden_head_may_be_missing: ClassVar[bool] = True
    access_hints: ClassVar[dict[str, str]] = {
        "SignatureDoesNotMatch": (
            "The credentials were refused: the secret does not match the access key. Check the "
            "secret (storage_options secret or AWS_SECRET_ACCESS_KEY) that goes with this key"
        ),
        "InvalidAccessKeyId": (
            "The endpoint knows no such access key: check the key (storage_options key or "
            "AWS_ACCESS_KEY_ID) and that the endpoint is the store that issued it"
        ),
        "AccessDenied": (
            "The credentials were accepted but may not do this: check the user's policy and the "
            "bucket policy for this action on this key"
        ),
        "ExpiredToken": "The session token has expired: get fresh credentials (AWS_SESSION_TOKEN)",
        "InvalidToken": "The session token is not valid: get fresh credentials (AWS_SESSION_TOKEN)",
    }
    # botocore's errors raised before any request.
    credential_problems: ClassVar[dict[str, tuple[str, str]]] = {
        "PartialCredentialsError": (
            "the credentials are incomplete",
            "Give both the key and the secret (storage_options={'key': ..., 'secret': ...}, or "
            "the environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or neither, "
            "to use the default chain (AWS_PROFILE, ~/.aws/credentials, an instance role)",
        ),
        "NoCredentialsError": (
            "no credentials were found",
            "Give storage_options={'key': ..., 'secret': ...}, set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or pass storage_options={'anon': True} for "
            "a public bucket",
        ),
    }

    def fs_options(self, options: dict[str, Any]) -> dict[str, Any]:
        return s3.s3_options(options)

    def endpoint(self, fs: Any, url: str, options: dict[str, Any]) -> str | None:
        client = getattr(fs, "_s3", None)
        found = getattr(getattr(client, "meta", None), "endpoint_url", None)
        if not found:
            found = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get(
                "endpoint_url"
            )
        if not found:
            found = (
                options.get("endpoint_url")
                or (options.get("client_kwargs") or {}).get("endpoint_url")
                or os.environ.get("FSSPEC_S3_ENDPOINT_URL")
                or os.environ.get("AWS_ENDPOINT_URL_S3")
                or os.environ.get("AWS_ENDPOINT_URL")
            )
        return redact_url(str(found)) if found else "the AWS default endpoint (no endpoint_url given)"

    def sized_ranged_get(self) -> RangedGet | None:
        return s3.ranged_get

    def read_from(self, start: int, end: int | None) -> Callable[[Any, str], Awaitable[bytes]] | None:
        if end is not None:
            return None

        async def read(fs: Any, path: str) -> bytes:  # checked against the answer's Content-Range
            return await s3.read_from(fs, path, start)

        return read

    async def watch_throttling(self, fs: Any) -> None:
        await s3.watch_throttling(fs)
