"""URLs as they may be shown: no credentials in what is recorded, logged or printed.

An input URL can carry secrets: userinfo (``https://user:password@host/...``) or a signed query
string (S3 presigned ``X-Amz-Signature``, Azure SAS ``sig=``, GCS ``X-Goog-Signature``, a
``token=``). `redact_url` removes both; every message, log line and manifest entry that names a URL passes it through
this function first (the one rule for the whole project). Reading still uses the full URL.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["redact_url", "redact_text"]

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
