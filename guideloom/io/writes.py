"""Writing files of a `guideloom.io.location.Location`: whole-file writes readers see all or
nothing of, creates that fail when the name is taken (``os.link`` on local disk, a conditional
PUT where the store honours ``If-None-Match``, else claims), and deletes. A mixin of `Location`;
a read-only store's backend refuses each before any request.
"""

from __future__ import annotations

import builtins
import os
import random
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from guideloom.errors import CommitConflictError
from guideloom.io.requests import Requests

__all__ = ["CLAIM_LEASE_S", "Writes"]

_CONDITIONAL: dict[str, bool] = {}  # endpoint -> whether it honours If-None-Match: * (probed once)
CLAIM_LEASE_S = 30.0  # a claim on a name older than this is a crashed writer's (`create`)


class Writes(Requests):
    """`write`, `create`, `delete` (see the module docstring)."""

    if TYPE_CHECKING:

        def modified_under(self, rel: str) -> dict[str, float]: ...  # `Location`'s listing

    def write(self, rel: str, chunks: bytes | Sequence[bytes | memoryview]) -> None:
        """Write a whole file so that readers see the old file or the new one, never a mix.

        Local disk: a temporary file in the same directory, then an atomic rename. Object
        stores: one PUT (a multipart upload also appears at once, when it completes).
        """
        self.backend.refuse_write(self.describe(rel))
        parts = [chunks] if isinstance(chunks, (bytes, bytearray, memoryview)) else list(chunks)
        with self._translated("writing", rel):
            path = self.path(rel)
            if self.is_local:
                tmp = _temp_beside(path)
                try:
                    with open(tmp, "wb") as f:
                        for part in parts:
                            f.write(part)
                    os.replace(tmp, path)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
            else:
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self._call("pipe_file", path, bytes(data))

    def create(self, rel: str, data: bytes, claims: str | None = None) -> bool:
        """Write a new file only if none is at ``rel``: True if this call created it, False if
        a file was already there (then nothing is written).

        Local disk: a temporary file, then ``os.link`` to the name (atomic; fails if the name
        exists). Object stores: a conditional PUT (``If-None-Match: *``) where the endpoint
        honours it (`conditional_writes`). Elsewhere, with ``claims`` (a folder for this one
        name), writers claim the name first (`_create_by_claim`); without it, a check then a
        PUT, which two writers racing within one request's time can both pass.
        """
        self.backend.refuse_write(self.describe(rel))
        with self._translated("creating", rel):
            path = self.path(rel)
            if self.is_local:
                tmp = _temp_beside(path)
                with open(tmp, "wb") as f:
                    f.write(data)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    return False
                finally:
                    os.unlink(tmp)
                return True
            if self.conditional_writes():
                try:
                    self._call("pipe_file", path, bytes(data), mode="create")
                except FileExistsError:
                    return False
                return True
        if claims is not None:
            return self._create_by_claim(rel, data, claims)
        with self._translated("creating", rel):
            if self._exists_now(path):
                return False
            self._call("pipe_file", path, bytes(data))
            return True

    def _exists_now(self, path: str) -> bool:
        self.fs.invalidate_cache(path)
        return bool(self._call("exists", path))

    def _create_by_claim(self, rel: str, data: bytes, claims: str) -> bool:
        """`create` on a store that ignores ``If-None-Match``, safe for any number of writers
        on a store whose listings show every finished write (S3, GCS and Azure are strongly
        consistent; so is Ceph RGW within one zone).

        A writer PUTs a claim of its own (a new, unique name) into ``claims``, then lists the
        folder, and creates ``rel`` only if its claim is the only live one there. Of two claims,
        the one written second is listed beside the first, so two writers never both see
        themselves alone; when each sees the other, both withdraw and try again after a random
        pause. A claim older than `CLAIM_LEASE_S` (by the store's clock, against this writer's
        own claim) is a crashed writer's and does not count. What is left unsafe: a writer that
        pauses for longer than the lease between its listing and its PUT of ``rel``.
        """
        path = self.path(rel)
        mine = f"{claims}/{time.time_ns():020d}-{uuid.uuid4().hex}"
        give_up = time.monotonic() + 2 * CLAIM_LEASE_S  # a crashed writer's claim goes stale first
        round_ = 0
        while True:
            with self._translated("creating", rel):
                if self._exists_now(path):
                    return False
            self.write(mine, b"")
            try:
                live = self._live_claims(claims, mine)
                if live == [mine]:
                    with self._translated("creating", rel):
                        if self._exists_now(path):  # taken while this writer claimed
                            return False
                        self._call("pipe_file", path, bytes(data))
                    return True
            finally:
                self.delete(mine)
            if time.monotonic() >= give_up:
                break
            time.sleep(random.uniform(0.02, 0.1) * 2 ** min(round_, 4))
            round_ += 1
        raise CommitConflictError(
            f"creating {self.describe(rel)}: other writers kept claiming the same name for "
            f"{2 * CLAIM_LEASE_S:g} s; this store ignores conditional writes (If-None-Match), so "
            "writers take turns by claims. Try again, or commit from fewer writers at once"
        )

    def _live_claims(self, claims: str, mine: str) -> builtins.list[str]:
        """The claims under ``claims`` that are not stale (`CLAIM_LEASE_S`), as relative paths;
        stale ones are removed on the way."""
        listed = self.modified_under(claims)
        own = listed.get(mine)
        live = []
        for name, when in listed.items():
            if own and when and when < own - CLAIM_LEASE_S:
                self.delete(name)  # a crashed writer's claim
                continue
            live.append(name)
        return sorted(live)

    def conditional_writes(self) -> bool:
        """Whether the store refuses a second create of one name (``If-None-Match: *``):
        detected once per endpoint and process, by creating a probe object twice."""
        key = self.endpoint or self.url.partition("://")[0]  # no endpoint: one answer per protocol
        known = _CONDITIONAL.get(key)
        if known is not None:
            return known
        if self.is_local:
            _CONDITIONAL[key] = True
            return True
        probe = self.path(f".guideloom-probe-{uuid.uuid4().hex}")
        supported = False
        try:
            self._call("pipe_file", probe, b"1", mode="create")
            self._call("pipe_file", probe, b"2", mode="create")
        except FileExistsError:
            supported = True  # the second create was refused
        except (OSError, ValueError, TypeError):
            supported = False  # the filesystem has no conditional create
        finally:
            try:
                self._call("rm", probe)
            except (OSError, FileNotFoundError):
                pass
        _CONDITIONAL[key] = supported
        return supported

    def delete(self, rel: str, recursive: bool = False) -> None:
        """Remove a file (or a tree with ``recursive``); missing is fine."""
        self.backend.refuse_write(self.describe(rel))
        with self._translated("deleting", rel):
            try:
                self._call("rm", self.path(rel), recursive=recursive)
            except FileNotFoundError:
                pass


def _temp_beside(path: str) -> str:
    """A fresh temporary name in ``path``'s folder (made if missing), for a file that then
    takes ``path`` in one atomic step (rename or link)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
