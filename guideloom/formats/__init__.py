"""Formats: records <-> bytes. NumPy only; no files, no fsspec, no torch."""

from guideloom.formats.annotations import StreamWithMetaJsonFormat, StreamWithMetaMsgpackFormat
from guideloom.formats.base import Format, FormatSpec, same_spec
from guideloom.formats.document import (
    DocumentJsonFormat,
    DocumentMsgpackFormat,
    DocumentPickleFormat,
    DocumentStorageFormat,
)
from guideloom.formats.meta import Span, StreamWithMetaStorageFormat, check_spans
from guideloom.formats.stream import StreamNumpyFormat

__all__ = [
    "DocumentJsonFormat",
    "DocumentMsgpackFormat",
    "DocumentPickleFormat",
    "DocumentStorageFormat",
    "Format",
    "FormatSpec",
    "Span",
    "StreamNumpyFormat",
    "StreamWithMetaJsonFormat",
    "StreamWithMetaMsgpackFormat",
    "StreamWithMetaStorageFormat",
    "check_spans",
    "same_spec",
]
