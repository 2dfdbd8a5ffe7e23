"""Document formats: one record <-> one byte string.

``DocumentStorageFormat`` is the base class users subclass; three are shipped. Pickle runs
arbitrary code when it decodes, so `DocumentPickleFormat` is for data you wrote yourself
or otherwise trust. JSON and MessagePack decode only data.
"""

from __future__ import annotations

import json
import pickle
from itertools import islice
from typing import Any

import msgpack

from guideloom.formats.base import Format

__all__ = [
    "DocumentJsonFormat",
    "DocumentMsgpackFormat",
    "DocumentPickleFormat",
    "DocumentStorageFormat",
]


class DocumentStorageFormat(Format):
    """Base class for document formats.

    Subclasses implement `encode` and `decode` so that
    ``decode(encode(record))`` gives back an equal record. ``decode`` may receive a
    ``memoryview`` instead of ``bytes``; it stays valid after the call.
    If the format has parameters that change the bytes, override `config` so the manifest
    records them.
    """

    def encode(self, record: Any) -> bytes:
        """Turn one record into bytes.

        The writer calls it once per appended record; any exception it raises, or a result that
        is not bytes, reaches the caller of `append` as a `RecordError`.

        Args:
            record: One document, as passed to `writer.append`.

        Returns:
            The document's bytes.

        Raises:
            NotImplementedError: A subclass did not implement it.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement encode(record) -> bytes")

    def decode(self, data: bytes | memoryview) -> Any:
        """Turn the bytes of one record back into the record.

        Args:
            data: Exactly the bytes `encode` returned (possibly as a `memoryview`, valid after
                the call).

        Returns:
            A record equal to the one encoded.

        Raises:
            NotImplementedError: A subclass did not implement it.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement decode(data) -> record")

    def decode_run(self, data: bytes | memoryview, bounds: list[int]) -> list[Any]:
        """Decode the consecutive records of one run of a shard: what the readers call for
        documents stored one after another (``bounds[i] - bounds[0]`` to ``bounds[i + 1] -
        bounds[0]`` in ``data`` is record ``i``). By default `decode` of each record; a format
        may decode a run at once, as long as the result is the same.

        Args:
            data: The run's bytes, from its first record's start to its last record's end.
            bounds: The records' offsets in the shard, ``len(records) + 1`` of them.

        Returns:
            The run's records, in order.
        """
        view, base, decode = memoryview(data), bounds[0], self.decode
        return [decode(view[a - base : b - base]) for a, b in zip(bounds, bounds[1:])]


class DocumentPickleFormat(DocumentStorageFormat):
    """Any picklable Python object. Read it only from trusted data: unpickling can run code."""

    def __init__(self, protocol: int = 5) -> None:
        """A pickle format.

        Args:
            protocol: The pickle protocol `encode` uses (recorded in the manifest).
        """
        self.protocol = protocol

    def config(self) -> dict[str, Any]:
        """The pickle protocol, as recorded in the manifest.

        Returns:
            `{"protocol": protocol}`.
        """
        return {"protocol": self.protocol}

    def encode(self, record: Any) -> bytes:
        """Pickle one record.

        Args:
            record: Any picklable object.

        Returns:
            The pickle of `record` with this format's protocol.

        Raises:
            pickle.PicklingError: `record` cannot be pickled (the writer reports it as a
                `RecordError`).
        """
        return pickle.dumps(record, protocol=self.protocol)

    def decode(self, data: bytes | memoryview) -> Any:
        """Unpickle one record. This can run arbitrary code: decode only data you trust.

        Args:
            data: The bytes `encode` returned.

        Returns:
            The unpickled record.

        Raises:
            pickle.UnpicklingError: The bytes are not a pickle.
        """
        return pickle.loads(data)


class DocumentJsonFormat(DocumentStorageFormat):
    """JSON values (dicts, lists, strings, numbers, booleans, None), stored as UTF-8."""

    def encode(self, record: Any) -> bytes:
        """Encode one record as compact UTF-8 JSON.

        Args:
            record: A JSON value: dict, list, str, int, float, bool or None.

        Returns:
            The record's JSON text, UTF-8 encoded.

        Raises:
            TypeError: The record holds a value JSON cannot encode, such as a NumPy array (the
                writer reports it as a `RecordError`).
        """
        try:
            return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except TypeError as err:
            raise TypeError(
                f"DocumentJsonFormat cannot encode this record ({err}); convert NumPy arrays with "
                ".tolist() or use DocumentMsgpackFormat / DocumentPickleFormat"
            ) from err

    def decode(self, data: bytes | memoryview) -> Any:
        """Decode one record from UTF-8 JSON.

        Args:
            data: The bytes `encode` returned.

        Returns:
            The JSON value.

        Raises:
            ValueError: The bytes are not valid JSON (`json.JSONDecodeError`).
        """
        return json.loads(bytes(data))


# A run is fed to the streaming decoder in pieces, so that its buffer stays small: a buffer of the
# whole run (hundreds of KiB for a group of batches) is above glibc's mmap threshold, so every run
# would map fresh pages and fault each one in (measured: 11 -> 19 us per batch of 8 documents in
# some worker processes and not others, as glibc's threshold moved).
_RUN_FEED = 32 * 1024
_RUN_BUFFER = 96 * 1024  # a piece, and what is left of a record cut at the previous piece's end


class DocumentMsgpackFormat(DocumentStorageFormat):
    """MessagePack values: like JSON plus ``bytes``; compact and fast."""

    def encode(self, record: Any) -> bytes:
        """Encode one record as MessagePack.

        Args:
            record: A MessagePack value: dict, list, str, bytes, int, float, bool or None.

        Returns:
            The record's MessagePack bytes.

        Raises:
            TypeError: The record holds a value MessagePack cannot encode, such as a NumPy array
                (the writer reports it as a `RecordError`).
        """
        try:
            return msgpack.packb(record, use_bin_type=True)
        except TypeError as err:
            raise TypeError(
                f"DocumentMsgpackFormat cannot encode this record ({err}); convert NumPy arrays "
                "with .tolist() or .tobytes(), or use DocumentPickleFormat for trusted data"
            ) from err

    def decode(self, data: bytes | memoryview) -> Any:
        """Decode one record from MessagePack.

        Args:
            data: The bytes `encode` returned.

        Returns:
            The MessagePack value (strings as `str`, binary as `bytes`).

        Raises:
            ValueError: The bytes are not valid MessagePack (msgpack's own errors).
        """
        return msgpack.unpackb(data, raw=False)

    def decode_run(self, data: bytes | memoryview, bounds: list[int]) -> list[Any]:
        """Decode a run of records in one streaming pass of MessagePack's C decoder (no Python
        call per record), checked to end exactly at the run's end with one value per record;
        anything else (a subclass's own `decode`, damaged bytes) goes record by record, so an
        error names the record as `decode` would.

        Args:
            data: The run's bytes.
            bounds: The records' offsets in the shard.

        Returns:
            The run's records, in order.
        """
        count = len(bounds) - 1
        if type(self).decode is DocumentMsgpackFormat.decode and count > 1:
            # the limits unpackb sets for one record: nothing longer than the bytes at hand
            size = len(data)
            unpacker = msgpack.Unpacker(raw=False, max_buffer_size=size, read_size=min(size, _RUN_BUFFER))
            view = memoryview(data)
            records: list[Any] = []
            try:
                for start in range(0, size, _RUN_FEED):
                    unpacker.feed(view[start : start + _RUN_FEED])
                    records.extend(islice(unpacker, count - len(records)))
            except Exception:  # damaged bytes (or more values than records): let decode name the record
                records = []
            if len(records) == count and unpacker.tell() == size == bounds[-1] - bounds[0]:
                return records
        return super().decode_run(data, bounds)
