"""Old home of the GCS and Azure client pieces, kept for imports: they now live in their
stores' backends (`guideloom.io.backends.gcs`, `guideloom.io.backends.azure`)."""

from __future__ import annotations

from typing import Any

from guideloom.io.backends import backend_of_fs
from guideloom.io.backends.azure import AZURE_BACKOFF, azure_ranged_get, quicken_azure_retries
from guideloom.io.backends.base import RangedGet
from guideloom.io.backends.gcs import gcs_ranged_get, gcs_read_whole

__all__ = [
    "AZURE_BACKOFF",
    "azure_ranged_get",
    "gcs_ranged_get",
    "gcs_read_whole",
    "quicken_azure_retries",
    "sized_ranged_get",
]


def sized_ranged_get(fs: Any) -> RangedGet | None:
    """The ranged GET that reports the object's size for ``fs``'s store, or None."""
    return backend_of_fs(fs).sized_ranged_get()
