"""What a backend's exception means, said once: retry it, or translate it into `guideloom.errors`.

fsspec backends raise whatever their client raises (``OSError`` subclasses, botocore and aiohttp
errors, their own timeouts). `translated` turns each into the GuideLoom error a user can act on,
with a message naming the file, the endpoint and a fix; `is_transient` says which are worth a
retry. Errors that are not the storage's (a bug, a bad argument) pass through unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from guideloom.errors import (
    BucketNotFoundError,
    DatasetNotFoundError,
    GuideLoomError,
    ManifestError,
    ShardCorruptError,
    StorageAccessError,
    StorageTimeoutError,
)
from guideloom.io.urls import redact_secrets

__all__ = [
    "DEADLINE_ENV",
    "DEADLINE_OPTION",
    "DeadlineExceeded",
    "ShortBodyError",
    "ThrottledError",
    "is_throttled",
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
    "azure",
    "google",
)
# Not-found answers of the GCS and Azure clients that are not FileNotFoundError.
_NOT_FOUND_NAMES = {"ResourceNotFoundError", "NotFound"}


class ShortBodyError(ConnectionError):
    """A ranged answer that ended before the end its own ``Content-Range`` announces (a body
    cut short on its way, though its length header agreed): transient, worth another GET."""


# What each store answers when it wants fewer requests (S3 503 SlowDown, GCS 429 / 503, Azure 503
# ServerBusy and 500 OperationTimedOut): retried with backoff until the deadline, and they lower
# the requests in flight (`guideloom.io.throttle`).
THROTTLE_CODES = frozenset(
    {
        "SlowDown",  # S3
        "ServiceUnavailable",  # S3 (503)
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "rateLimitExceeded",  # GCS JSON API
        "ServerBusy",  # Azure Blob
        "OperationTimedOut",  # Azure Blob (500)
    }
)
THROTTLE_STATUSES = frozenset({429, 503})


class ThrottledError(ConnectionError):
    """The store kept answering "slow down" to one request (``answers`` times; ``answer`` says
    which, e.g. ``503 SlowDown``): transient, retried within the deadline."""

    def __init__(self, answers: int, answer: str) -> None:
        super().__init__(f"throttled: {answers} answer(s) {answer}")
        self.answers, self.answer = answers, answer


def throttle_answer(err: BaseException) -> str | None:
    """The throttling answer behind ``err`` (``"503 SlowDown"``, ``"429"``, ...), or None if
    ``err`` is not a store asking for fewer requests. Looks through the exception's chain: s3fs
    raises ``OSError(EBUSY)`` from botocore's ``ClientError``, gcsfs an ``HttpError`` with the
    status as ``code``, azure-core an ``HttpResponseError`` with ``status_code`` and
    ``error_code``."""
    seen: BaseException | None = err
    for _ in range(6):
        if seen is None:
            return None
        if isinstance(seen, ThrottledError):
            return seen.answer
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            if code in THROTTLE_CODES or status in THROTTLE_STATUSES or code in ("503", "429"):
                return f"{status} {code}" if status and code else str(status or code)
        error_code = getattr(seen, "error_code", None)
        error_code = getattr(error_code, "value", error_code)
        status = getattr(seen, "status_code", None)
        if not isinstance(status, int):
            status = getattr(seen, "code", None)
        if isinstance(error_code, str) and error_code in THROTTLE_CODES:
            return f"{status} {error_code}" if isinstance(status, int) else error_code
        if isinstance(status, int) and status in THROTTLE_STATUSES and _is_backend_error(seen):
            return str(status)
        seen = seen.__cause__ or seen.__context__
    return None


def is_throttled(err: BaseException) -> bool:
    """Whether ``err`` is the store asking for fewer requests (`throttle_answer`)."""
    return throttle_answer(err) is not None


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
    return (
        isinstance(err, _TRANSIENT)
        or name in _TRANSIENT_NAMES
        or name in _CHECKSUM_NAMES
        or is_throttled(err)
    )


def is_checksum_mismatch(err: BaseException) -> bool:
    """Whether ``err`` says a response's bytes differ from the checksum the store sent with them."""
    return type(err).__name__ in _CHECKSUM_NAMES


def is_deadline(err: BaseException) -> bool:
    """Whether ``err`` is fsspec's own timeout (the deadline handed to an async filesystem)."""
    return type(err).__name__ == "FSTimeoutError"


class StoreTexts(Protocol):
    """How messages word one store (a `guideloom.io.backends.Backend` is one)."""

    @property
    def display_name(self) -> str: ...

    @property
    def bucket_word(self) -> str: ...

    @property
    def endpoint_options(self) -> str | None: ...

    @property
    def generic_hint(self) -> str | None: ...

    @property
    def throttle_spread(self) -> str | None: ...

    @property
    def forbidden_head_may_be_missing(self) -> bool: ...

    @property
    def access_hints(self) -> dict[str, str]: ...

    @property
    def credential_problems(self) -> dict[str, tuple[str, str]]: ...


@contextmanager
def translated(
    action: str, where: str, endpoint: Callable[[], str | None], store: StoreTexts
) -> Iterator[None]:
    """Raise what the body raises as a `guideloom.errors` error (or ``FileNotFoundError``) whose
    message starts with ``"{action} {where}"`` and names ``endpoint()`` where it matters.

    ``endpoint()`` is None for local disk: an error there names the disk, never an endpoint (an
    ``AWS_ENDPOINT_URL`` in the environment has nothing to do with a local path). ``store``
    (the store's backend, `guideloom.io.backends.texts_for`) words what differs by store."""
    try:
        yield
    except GuideLoomError:
        raise
    except DeadlineExceeded as err:
        if err.last is not None and is_throttled(err.last):
            raise StorageTimeoutError(
                f"{action} {where}: {_throttled_text(store, endpoint(), err.last)} for the whole "
                f"I/O deadline of {err.seconds:g} s ({err.attempts} attempt(s)). "
                f"{_throttle_fix(store)}"
            ) from err.last
        last = f"; last error: {type(err.last).__name__}: {_safe(err.last)}" if err.last else ""
        raise StorageTimeoutError(
            f"{action} {where}: no complete answer from {_at(endpoint())} "
            f"within {err.seconds:g} s ({err.attempts} attempt(s){last}). Check that the "
            f"endpoint is up and reachable, or allow more time ({DEADLINE_ENV}, or the storage "
            f"option {DEADLINE_OPTION})"
        ) from err.last
    except NotADirectoryError as err:
        raise _not_a_directory(action, where) from err
    except FileNotFoundError as err:
        at = endpoint()
        if _bucket_missing(err):
            raise BucketNotFoundError(
                f"{action} {where}: the {_bucket_word(store)} does not exist at the endpoint {at}; "
                f"create the {_bucket_word(store)} first, or check its name and the endpoint "
                f"({_endpoint_options(store)})"
            ) from err
        if action == "writing" and at is not None:
            raise FileNotFoundError(
                f"{action} {where}: the {_bucket_word(store)} does not exist at the endpoint {at}; "
                f"create the {_bucket_word(store)} first, or check its name and the endpoint "
                f"({_endpoint_options(store)})"
            ) from err
        raise FileNotFoundError(f"{action} {where}: not found") from err
    except PermissionError as err:
        at = endpoint()
        if at is None:
            raise StorageAccessError(
                f"{action} {where}: the local file system refused it ({type(err).__name__}: "
                f"{_safe(err)}). Check the permissions and owner of the file and its folders "
                "(ls -l), or choose a location you may use"
            ) from err
        code, text = _service_code(err, store)
        if code:
            hint = store.access_hints.get(code, _generic_hint(store))
            if action == "checking" and code in ("403", "Forbidden") and store.forbidden_head_may_be_missing:
                hint = _HEAD_FORBIDDEN_HINT
            raise StorageAccessError(
                f"{action} {where}: access denied by the storage endpoint {at} ({code}"
                f"{': ' + text if text else ''}). {hint}"
            ) from err
        raise StorageAccessError(
            f"{action} {where}: access denied by the storage endpoint {at} "
            f"({type(err).__name__}: {_safe(err)}). {_generic_hint(store)}"
        ) from err
    except Exception as err:
        name = type(err).__name__
        if name in _NOT_FOUND_NAMES or getattr(err, "status_code", None) == 404:
            at = endpoint()
            if _bucket_missing(err):
                raise BucketNotFoundError(
                    f"{action} {where}: the {_bucket_word(store)} does not exist at the endpoint "
                    f"{at}; create the {_bucket_word(store)} first, or check its name and the "
                    f"endpoint ({_endpoint_options(store)})"
                ) from err
            raise FileNotFoundError(f"{action} {where}: not found at the endpoint {at}") from err
        status = getattr(err, "status_code", None) or getattr(err, "code", None)
        if status in (401, 403) and _is_backend_error(err):
            code, text = _service_code(err, store)
            shown = f"{code}{': ' + text if text else ''}" if code else f"HTTP {status}"
            raise StorageAccessError(
                f"{action} {where}: access denied by the storage endpoint {endpoint()} ({shown}). "
                f"{store.access_hints.get(code or '', _generic_hint(store))}"
            ) from err
        if name in store.credential_problems:
            problem, fix = store.credential_problems[name]
            raise StorageAccessError(
                f"{action} {where}: {problem} ({name}: {_safe(err)}), so no "
                f"request was sent to {_at(endpoint())}. {fix}"
            ) from err
        if is_throttled(err):
            raise StorageAccessError(
                f"{action} {where}: {_throttled_text(store, endpoint(), err)} on every retry. "
                f"{_throttle_fix(store)}"
            ) from err
        if is_checksum_mismatch(err) or isinstance(err, ShortBodyError):
            # It persisted through the retries: the object is damaged, or its way is.
            error = ManifestError if where.endswith(".json") else ShardCorruptError
            what = (
                "ended before the end its own Content-Range announces"
                if isinstance(err, ShortBodyError)
                else "had bytes that do not match the checksum the store recorded for the object"
            )
            raise error(
                f"{action} {where}: every answer from {_at(endpoint())} {what} ({name}: {_safe(err)}), on each retry: the object is damaged on "
                "the server, or something between (a proxy, a cache) damages it. Check the "
                "dataset with `guideloom verify` (its URL, without the file's name); if that fails "
                "too, restore the file or rewrite the dataset"
            ) from err
        if name in _UNREACHABLE:  # botocore / aiohttp: nothing answered
            raise StorageAccessError(
                f"{action} {where}: could not connect to the storage endpoint {endpoint()} "
                f"({name}). Check the endpoint ({_endpoint_options(store)}) and that the server "
                "is running"
            ) from err
        if not _is_backend_error(err):
            raise  # a bug or a bad argument, not the storage: keep it as it is
        at = endpoint()
        if at is None:
            raise StorageAccessError(
                f"{action} {where}: the local file system failed ({name}: {_safe(err)}). Check "
                "the path, the free space (df -h) and the disk"
            ) from err
        code, text = _service_code(err, store)
        if code in store.access_hints or (isinstance(err, OSError) and _looks_like_access_problem(err)):
            shown = f"{code}{': ' + text if text else ''}" if code else _safe(err)
            raise StorageAccessError(
                f"{action} {where}: the storage endpoint {at} refused the request ({shown}). "
                f"{store.access_hints.get(code or '', _generic_hint(store))}"
            ) from err
        raise StorageAccessError(
            f"{action} {where}: the storage endpoint {at} failed "
            f"({name}: {_safe(err)}) after retries. It may be overloaded or "
            "the object damaged on the server; retry later, and run `guideloom verify` if it "
            "persists"
        ) from err


def _throttled_text(store: StoreTexts, endpoint: str | None, err: BaseException) -> str:
    return (
        f"the {store.display_name} endpoint {endpoint} throttled the requests "
        f"(it answered {throttle_answer(err)}: slow down)"
    )


def _throttle_fix(store: StoreTexts) -> str:
    """What to do about throttling that lasts: fewer requests, a higher limit, more prefixes."""
    spread = store.throttle_spread
    return (
        "GuideLoom already lowered its requests in flight and backed off; the store still asks "
        "for fewer. Lower the request rate (fewer DataLoader workers or readers of this "
        f"dataset at once), request a higher limit from the provider, or {spread}; or allow "
        f"more time ({DEADLINE_ENV}, or the storage option {DEADLINE_OPTION})"
    )


def _at(endpoint: str | None) -> str:
    return "the local file system" if endpoint is None else f"the storage endpoint {endpoint}"


def _bucket_word(store: StoreTexts) -> str:
    return str(store.bucket_word)


def _endpoint_options(store: StoreTexts) -> str:
    return str(store.endpoint_options)


# S3 answers a HEAD of a missing object with 403 (no body, so no code) when the caller may not
# list the bucket: otherwise it would tell which names exist.
_HEAD_FORBIDDEN_HINT = (
    "S3 answers 403 for an object that does not exist when the credentials may not list the "
    "bucket: allow s3:ListBucket on the bucket (readers need s3:GetObject and s3:ListBucket; "
    "see the policies in docs/remote-buckets.md), or check the credentials"
)


def _generic_hint(store: StoreTexts) -> str:
    return str(store.generic_hint)


def _service_code(err: BaseException, store: StoreTexts) -> tuple[str | None, str]:
    """The store's own error code and message in ``err``'s chain (botocore's ``response``), or
    ``(None, "")``: what the backend's translation may have lost (``PermissionError: None``)."""
    seen: BaseException | None = err
    for _ in range(6):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            info = response.get("Error") or {}
            code = info.get("Code")
            if code:
                message = info.get("Message")
                return str(code), (str(message).splitlines()[0][:200] if message else "")
        code = getattr(seen, "error_code", None)  # azure-core's HttpResponseError (an enum)
        code = getattr(code, "value", code)
        if isinstance(code, str) and code:
            return str(code), ""
        seen = seen.__cause__ or seen.__context__
    text = str(err)
    found = next((c for c in store.access_hints if c in text), None)
    return found, ""


def _not_a_directory(action: str, where: str) -> GuideLoomError:
    """A path through a file (``DIR/manifest.json/...``): name the file and the folder to use."""
    probe = where
    while probe and probe != os.path.dirname(probe) and not os.path.isfile(probe):
        probe = os.path.dirname(probe)
    if not os.path.isfile(probe):
        probe = where
    folder = os.path.dirname(probe)
    message = (
        f"{action} {where}: {probe} is a file, not a directory. A dataset URL names the "
        f"dataset's folder (the one that holds manifest.json), not a file in it: use {folder}"
    )
    return DatasetNotFoundError(message) if action != "writing" else StorageAccessError(message)


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
            or getattr(seen, "error_code", None) == "ContainerNotFound"
            or any(code in text for code in ("NoSuchBucket", "ContainerNotFound"))
            or "bucket does not exist" in text.lower()
            or "container does not exist" in text.lower()
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _safe(err: BaseException) -> str:
    # Backend messages name buckets and keys; any credential in them (an Azure AccountKey, a
    # SAS or signed-URL signature, a private key) is masked, and they are cut short.
    return redact_secrets(str(err).splitlines()[0][:300]) if str(err) else type(err).__name__


def _looks_like_access_problem(err: OSError) -> bool:
    text = str(err)
    return any(
        code in text
        for code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "403")
    )
