"""The stream format: a record is a dict of equal-length 1-D arrays, one value per token.

Underneath, the fields form one NumPy *structured* dtype, so token ``i`` of a stream is one
fixed-size element holding every field's value (``{"tokens": uint32, "loss_mask": uint8}`` is a
5-byte element, little-endian, packed). A stream shard is those elements back to back, which
makes the byte range of tokens ``[a, b)`` plain arithmetic and lets a reader fetch any window
with one range request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from guideloom.errors import RecordError
from guideloom.formats.base import Format

__all__ = ["StreamNumpyFormat"]


class StreamNumpyFormat(Format):
    """A stream of per-token fields, given as ``{name: dtype}`` (1-D, fixed-size dtypes).

    ``StreamNumpyFormat({"tokens": np.uint16})`` stores token ids; add fields such as a document
    id or a loss mask when every token has one fixed-size value for them. Appended arrays are
    cast to the field dtype only where no value changes: ``70_000`` into ``uint16`` is an error,
    never a silent wrap.
    """

    def __init__(self, fields: Mapping[str, Any]) -> None:
        """A stream format of the given per-token fields.

        Args:
            fields: `{name: dtype}` in storage order: one scalar boolean, integer or float
                NumPy dtype per field (multi-byte dtypes are stored little-endian). A token
                takes the sum of the fields' sizes in bytes (`itemsize`).

        Raises:
            TypeError: `fields` is empty or not a mapping, a name is not a non-empty string, or
                a dtype is not a scalar boolean, integer or float dtype.
        """
        if not isinstance(fields, Mapping) or not fields:
            raise TypeError(
                "StreamNumpyFormat needs a non-empty mapping of field name to dtype, "
                "e.g. StreamNumpyFormat({'tokens': np.uint32})"
            )
        parsed: list[tuple[str, np.dtype]] = []
        for name, dt in fields.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"stream field names must be non-empty strings, got {name!r}")
            try:
                dtype = np.dtype(dt)
            except TypeError as err:
                raise TypeError(f"field {name!r}: {dt!r} is not a NumPy dtype") from err
            if dtype.kind not in "biuf" or dtype.shape or dtype.fields:
                raise TypeError(
                    f"field {name!r}: dtype {dtype} is not supported; stream fields are scalar "
                    "booleans, integers or floats (one fixed-size value per token)"
                )
            parsed.append((name, dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype))
        self.fields: dict[str, np.dtype] = dict(parsed)
        self.dtype = np.dtype(parsed)  # packed structured dtype: one element per token
        # one field: a record {name: 1-D array of exactly its dtype} is copied as it is
        self._single = parsed[0] if len(parsed) == 1 else None

    @property
    def itemsize(self) -> int:
        """Bytes per token (all fields together)."""
        return int(self.dtype.itemsize)

    def config(self) -> dict[str, Any]:
        """The fields and their dtypes, as recorded in the manifest.

        Returns:
            `{"fields": [[name, dtype string], ...]}`, e.g. `[["tokens", "<u2"]]`.
        """
        return {"fields": [[name, dt.str] for name, dt in self.fields.items()]}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StreamNumpyFormat:
        """The format a manifest's `format.config` describes (the inverse of `config`).

        Args:
            config: `{"fields": [[name, dtype string], ...]}`.

        Returns:
            An equal `StreamNumpyFormat`.

        Raises:
            KeyError: `config` has no `"fields"`.
            TypeError: A dtype is not supported (see the constructor).
        """
        return cls({name: np.dtype(dt) for name, dt in config["fields"]})

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: np.{dt.name}" for n, dt in self.fields.items())
        return f"StreamNumpyFormat({{{inner}}})"

    # -- records -> elements --------------------------------------------------------------

    def exact_values(self, record: Any) -> np.ndarray | None:
        """The values of ``record`` if it is ``{field: 1-D array of exactly its dtype}`` for a
        format of one field (nothing to check or cast: such a record cannot be refused), else
        None. The writer's fast paths and `to_elements` share this one test.

        Args:
            record: Any object; only a dict with exactly the format's one field can qualify.

        Returns:
            That field's array itself (not a copy), or None.
        """
        single = self._single
        if single is None or type(record) is not dict or len(record) != 1:
            return None
        values = record.get(single[0])
        if type(values) is not np.ndarray or values.ndim != 1 or values.dtype != single[1]:
            return None
        return values

    def to_elements(
        self, record: Mapping[str, Any], where: str = "record", *, copy: bool = True
    ) -> np.ndarray:
        """Check one record and return it as a 1-D structured array (one element per token).

        Values are cast to the field dtypes only where none changes.

        Args:
            record: `{field: 1-D array}` with one value per token for every field.
            where: What the error messages name first (the writer passes URL, part and record).
            copy: False: a record of one contiguous field of exactly its dtype comes back as a
                view of the caller's array (no copy); the caller must copy what it keeps.

        Returns:
            A structured array of `len(tokens)` elements of `dtype`.

        Raises:
            RecordError: Missing or unknown fields, fields of different lengths, an array that
                is not 1-D, or a value that does not fit its dtype (named with the field).
        """
        arr = self.exact_values(record)  # the common case, e.g. {"tokens": uint16 array}
        if arr is not None:
            if not copy and arr.flags.c_contiguous:
                return arr.view(self.dtype)
            return arr.copy().view(self.dtype)  # a copy: the caller may reuse its array
        if not isinstance(record, Mapping):
            raise RecordError(
                f"{where}: a stream record is a dict of 1-D arrays with fields "
                f"{list(self.fields)}, got {type(record).__name__}"
            )
        missing = [f for f in self.fields if f not in record]
        extra = [f for f in record if f not in self.fields]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing field(s) {missing}")
            if extra:
                parts.append(f"unknown field(s) {extra}")
            raise RecordError(
                f"{where}: {' and '.join(parts)}; this format has fields {list(self.fields)} "
                "(add them to StreamNumpyFormat or drop them from the record)"
            )
        arrays = {}
        length = None
        for name, target in self.fields.items():
            arr = np.asarray(record[name])
            if arr.ndim != 1:
                raise RecordError(
                    f"{where}: field {name!r} has shape {arr.shape}; stream fields are 1-D "
                    "(one value per token): flatten it or append each row as its own record"
                )
            if length is None:
                length = len(arr)
            elif len(arr) != length:
                lengths = {n: len(np.asarray(record[n])) for n in self.fields}
                raise RecordError(
                    f"{where}: fields have different lengths {lengths}; every field needs one value per token"
                )
            arrays[name] = _cast_exact(arr, target, f"{where}: field {name!r}")
        out = np.empty(length or 0, dtype=self.dtype)
        for name, arr in arrays.items():
            out[name] = arr
        return out

    def split_fields(self, elements: np.ndarray) -> dict[str, np.ndarray]:
        """Structured elements -> ``{field: array}``: what readers hand out for a batch of windows.

        With one field, and contiguous ``elements``, the result is a view of the same bytes as
        that field's dtype (no copy: a packed single-field element is just the value); with
        several fields, each field is copied out into a contiguous array.

        Args:
            elements: A structured array of this format's `dtype`.

        Returns:
            One contiguous array per field, each with the shape of `elements`.
        """
        if len(self.fields) == 1 and elements.flags.c_contiguous:
            ((name, dt),) = self.fields.items()
            return {name: elements.view(dt)}
        return {name: np.ascontiguousarray(elements[name]) for name in self.fields}


def _cast_exact(arr: np.ndarray, target: np.dtype, where: str) -> np.ndarray:
    """Cast ``arr`` to ``target`` only if every value survives unchanged."""
    if arr.dtype == target:
        return arr
    if arr.size == 0:
        return arr.astype(target)
    if np.can_cast(arr.dtype, target, casting="safe"):
        return arr.astype(target)
    src, dst = arr.dtype.kind, target.kind
    if src == "f" and dst in "biu":
        # Whole-number floats (np.ones for a mask, say) are stored; anything else is refused.
        whole = np.isfinite(arr) & (arr == np.round(arr))
        if not whole.all():
            bad = arr[~whole][0]
            raise RecordError(
                f"{where}: value {bad} is not a whole number, so it cannot be stored as "
                f"{target.name}; round it yourself or use a float dtype for this field"
            )
        arr = arr.astype(np.int64) if arr.min() >= -(2**63) and arr.max() < 2**63 else arr
        src = "i" if arr.dtype.kind == "i" else src
    if src in "biu" and dst in "biu":
        if dst == "b":
            ok = bool(np.isin(arr, (0, 1)).all())
        else:
            info = np.iinfo(target)
            lo, hi = int(arr.min()), int(arr.max())
            ok = info.min <= lo and hi <= info.max
            if not ok:
                bad = lo if lo < info.min else hi
                raise RecordError(
                    f"{where}: value {bad} does not fit {target.name} "
                    f"(range {info.min}..{info.max}); choose a wider dtype in the format"
                )
        if ok:
            return arr.astype(target)
    elif src == "f" and dst == "f":
        cast = arr.astype(target)
        finite = np.isfinite(arr)
        if np.isfinite(cast[finite]).all():
            return cast
        raise RecordError(f"{where}: values overflow {target.name}; choose a wider float dtype")
    elif src in "biu" and dst == "f":
        cast = arr.astype(target)
        if np.array_equal(cast.astype(arr.dtype), arr):
            return cast
    raise RecordError(
        f"{where}: cannot store {arr.dtype} values as {target.name} without changing them; "
        f"convert the array yourself or change the field's dtype"
    )
