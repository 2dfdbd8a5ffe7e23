"""What a backend's exception means, said once: retry it, or translate it into `guideloom.errors`.

fsspec backends raise whatever their client raises (``OSError`` subclasses, botocore and aiohttp
errors, their own timeouts). `translated` turns each into the GuideLoom error a user can act on,
with a message naming the file, the endpoint and a fix; `is_transient` says which are worth a
retry. Errors that are not the storage's (a bug, a bad argument) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from guideloom.errors import (
    BucketNotFoundError,
    GuideLoomError,
    ManifestError,
    ShardCorruptError,
    StorageAccessError,
    StorageTimeoutError,
)

__all__ = [
    "DEADLINE_ENV",
    "DEADLINE_OPTION",
    "DeadlineExceeded",
    "ShortBodyError",
    "is_transient",
    "translated",
]

DEADLINE_ENV = "GUIDELOOM_IO_DEADLINE_S"
DEADLINE_OPTION = "guideloom_deadline_s"  # a storage option GuideLoom takes out for itself

_TRANSIENT = (ConnectionError, TimeoutError)
# Raised by aiohttp when a body ends early or the server drops the connection: worth a retry.
_TRANSIENT_NAMES = {"ClientPayloadError", "ServerDisconnectedError", "ClientOSError", "ContentLengthError"}
# A body whose bytes do not match the checksum the store recorded for the object (botocore's
# response checksum; a body damaged on its way): another GET usually brings the right bytes.
# One that persists is corruption (see `translated`).
_CHECKSUM_NAMES = {"FlexibleChecksumError"}
_UNREACHABLE = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ClientConnectorError",
    "ConnectionRefusedError",
}
_BACKEND_MODULES = (
    "aiohttp",
    "botocore",
    "aiobotocore",
    "s3fs",
    "fsspec",
    "urllib3",
    "requests",
    "gcsfs",
    "adlfs",
)


class ShortBodyError(ConnectionError):
    """A ranged answer that ended before the end its own ``Content-Range`` announces (a body
    cut short on its way, though its length header agreed): transient, worth another GET."""


class DeadlineExceeded(Exception):
    """Internal: an operation ran out of its total time; ``last`` is the error seen before."""

    def __init__(self, seconds: float, attempts: int, last: BaseException | None) -> None:
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds, self.attempts, self.last = seconds, attempts, last


def is_transient(err: BaseException) -> bool:
    """Whether ``err`` is worth another attempt (a dropped connection, a body cut short)."""
    if type(err).__name__ == "FSTimeoutError":
        return False  # our own deadline, handled by the caller
    name = type(err).__name__
    return isinstance(err, _TRANSIENT) or name in _TRANSIENT_NAMES or name in _CHECKSUM_NAMES


def is_checksum_mismatch(err: BaseException) -> bool:
    """Whether ``err`` says a response's bytes differ from the checksum the store sent with them."""
    return type(err).__name__ in _CHECKSUM_NAMES


def is_deadline(err: BaseException) -> bool:
    """Whether ``err`` is fsspec's own timeout (the deadline handed to an async filesystem)."""
    return type(err).__name__ == "FSTimeoutError"


@contextmanager
def translated(action: str, where: str, endpoint: Callable[[], str]) -> Iterator[None]:
    """Raise what the body raises as a `guideloom.errors` error (or ``FileNotFoundError``) whose
    message starts with ``"{action} {where}"`` and names ``endpoint()`` where it matters."""
    try:
        yield
    except GuideLoomError:
        raise
    except DeadlineExceeded as err:
        last = f"; last error: {type(err.last).__name__}: {_safe(err.last)}" if err.last else ""
        raise StorageTimeoutError(
            f"{action} {where}: no complete answer from the storage endpoint {endpoint()} "
            f"within {err.seconds:g} s ({err.attempts} attempt(s){last}). Check that the "
            f"endpoint is up and reachable, or allow more time ({DEADLINE_ENV}, or the storage "
            f"option {DEADLINE_OPTION})"
        ) from err.last
    except FileNotFoundError as err:
        if _bucket_missing(err):
            raise BucketNotFoundError(
                f"{action} {where}: the bucket does not exist at the endpoint {endpoint()}; "
                "create the bucket first, or check its name and the endpoint_url"
            ) from err
        if action == "writing":
            raise FileNotFoundError(
                f"{action} {where}: the bucket or parent directory does not exist; create the "
                "bucket first (or check its name and the endpoint_url)"
            ) from err
        raise FileNotFoundError(f"{action} {where}: not found") from err
    except PermissionError as err:
        raise StorageAccessError(
            f"{action} {where}: access denied ({type(err).__name__}: {_safe(err)}). Check the "
            "credentials (storage_options key/secret or the AWS_* environment variables), the "
            "endpoint_url, and that the bucket exists and you may use it"
        ) from err
    except Exception as err:
        if is_checksum_mismatch(err):  # it persisted through the retries: the object is damaged
            error = ManifestError if where.endswith(".json") else ShardCorruptError
            raise error(
                f"{action} {where}: every answer from the storage endpoint {endpoint()} had bytes "
                f"that do not match the checksum the store recorded for the object "
                f"({type(err).__name__}: {_safe(err)}), on each retry: the object is damaged on "
                "the server, or something between (a proxy, a cache) damages it. Check the "
                "dataset with `guideloom verify` (its URL, without the file's name); if that fails "
                "too, restore the file or rewrite the dataset"
            ) from err
        if type(err).__name__ in _UNREACHABLE:  # botocore / aiohttp: nothing answered
            raise StorageAccessError(
                f"{action} {where}: could not connect to the storage endpoint {endpoint()} "
                f"({type(err).__name__}). Check the endpoint_url (storage_options endpoint_url "
                "or client_kwargs.endpoint_url, FSSPEC_S3_ENDPOINT_URL, AWS_ENDPOINT_URL) and "
                "that the server is running"
            ) from err
        if not _is_backend_error(err):
            raise  # a bug or a bad argument, not the storage: keep it as it is
        if isinstance(err, OSError) and _looks_like_access_problem(err):
            raise StorageAccessError(
                f"{action} {where}: the storage refused the request ({_safe(err)}). Check the "
                "credentials, the endpoint_url and the bucket name"
            ) from err
        raise StorageAccessError(
            f"{action} {where}: the storage endpoint {endpoint()} failed "
            f"({type(err).__name__}: {_safe(err)}) after retries. It may be overloaded or "
            "the object damaged on the server; retry later, and run `guideloom verify` if it "
            "persists"
        ) from err


def _is_backend_error(err: BaseException) -> bool:
    module = type(err).__module__.split(".", 1)[0]
    return isinstance(err, OSError) or module in _BACKEND_MODULES or type(err).__name__ == "TimeoutError"


def _bucket_missing(err: BaseException) -> bool:
    """Whether the backend said the bucket is missing (some servers give no message: then only
    the botocore error class in the chain tells)."""
    seen: BaseException | None = err
    for _ in range(5):
        if seen is None:
            return False
        text = str(seen)
        if (
            type(seen).__name__ == "NoSuchBucket"
            or "NoSuchBucket" in text
            or "bucket does not exist" in text.lower()
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _safe(err: BaseException) -> str:
    # Backend messages name buckets and keys, never secrets; cut them short anyway.
    return str(err).splitlines()[0][:300] if str(err) else type(err).__name__


def _looks_like_access_problem(err: OSError) -> bool:
    text = str(err)
    return any(
        code in text
        for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "403")
    )
