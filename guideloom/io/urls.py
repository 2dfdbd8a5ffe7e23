"""URLs as they may be shown: no credentials in what is recorded, logged or printed.

An input URL can carry secrets: userinfo (``https://user:password@host/...``) or a signed query
string (S3 presigned ``X-Amz-Signature``, Azure SAS ``sig=``, GCS ``X-Goog-Signature``, a
``token=``). `redact_url` removes both; every message, log line and manifest entry that names a URL passes it through
this function first (the one rule for the whole project). Reading still uses the full URL.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["redact_options", "redact_secrets", "redact_text", "redact_url"]

SHOWN = "***"
# Storage options (any store) whose values are credentials: S3 key/secret/session token, GCS
# token (a service-account's JSON content, or an OAuth token), Azure account key, SAS token,
# connection string, client secret, credential objects.
_SECRET_OPTIONS = frozenset(
    {
        "key",
        "secret",
        "token",
        "session_token",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "account_key",
        "sas_token",
        "connection_string",
        "client_secret",
        "credential",
        "credentials",
        "password",
        "private_key",
    }
)
# Secrets as they appear inside text: Azure connection-string fields, SAS / signed-URL query
# parameters, a service-account file's private key, an Authorization header.
_SECRET_PATTERNS = [
    re.compile(r"(?i)(AccountKey|SharedAccessSignature|SharedAccessKey)=[^;\s'\"]+"),
    re.compile(
        r"(?i)([?&](?:sig|X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|X-Goog-Credential|token|access_token))=[^&\s'\"]+"
    ),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[^-]*-----END [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"(?i)(\"private_key\"\s*:\s*)\"[^\"]*\""),
    re.compile(r"(?i)(Authorization:?\s*(?:SharedKey|Bearer|AWS4-HMAC-SHA256)\s+)[^\s,'\"]+"),
]

# Query parameter names (lowercase) that make a URL a signed or token-bearing one.
_SECRET_PARAMS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "googleaccessid",
        "signature",
        "sig",
        "se",
        "sp",
        "sv",
        "token",
        "access_token",
        "auth",
        "key",
        "apikey",
        "api_key",
    }
)


def redact_url(url: str) -> str:
    """``url`` without userinfo and, when any parameter is a signature or token, without its query.

    Plain paths and URLs without secrets come back unchanged.
    """
    if "://" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        names = {name.lower() for name, _ in parse_qsl(query, keep_blank_values=True)}
        if names & _SECRET_PARAMS:
            query = ""
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str, urls: list[str]) -> str:
    """``text`` with each of ``urls`` (those that carry secrets) replaced by its redacted form."""
    for url in sorted(set(urls), key=len, reverse=True):
        safe = redact_url(url)
        if safe != url:
            text = text.replace(url, safe)
    return text


def redact_secrets(text: str) -> str:
    """``text`` with every credential it shows masked: Azure ``AccountKey=`` and SAS fields,
    signed-URL signatures and tokens, private keys of service-account files, Authorization
    headers. For messages built from a backend's own error text."""
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(_masked, text)
    return text


def _masked(match: re.Match[str]) -> str:
    if not match.groups():
        return SHOWN
    lead = match.group(1)
    return f"{lead}{'' if lead[-1] in ': ' else '='}{SHOWN}"


def redact_options(options: dict[str, Any]) -> dict[str, Any]:
    """A copy of fsspec storage options fit to show: credential values (S3 key and secret, GCS
    token or service-account content, Azure account key, SAS token, connection string...)
    replaced by ``***``; a GCS ``token`` that is a file path or a mode (``anon``,
    ``google_default``) is kept, as it holds no secret itself. Nested dicts are redacted too."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if name.lower() in _SECRET_OPTIONS and value not in (None, ""):
            out[name] = value if name == "token" and _harmless_token(value) else SHOWN
        elif isinstance(value, dict):
            out[name] = redact_options(value)
        elif isinstance(value, str):
            out[name] = redact_secrets(redact_url(value))
        else:
            out[name] = value
    return out


def _harmless_token(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    return value in ("anon", "google_default", "cache", "cloud", "browser") or value.endswith(".json")
