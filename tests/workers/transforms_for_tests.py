"""Transforms imported by path in the transform tests (``--transform transforms_for_tests:NAME``)."""

from __future__ import annotations

from typing import Any


def shout_and_drop_odd(record: dict[str, Any]) -> dict[str, Any] | None:
    """Drop odd ids; upper-case the rest."""
    if record["id"] % 2:
        return None
    return {**record, "text": record["text"].upper()}


def raise_on_three(record: dict[str, Any]) -> dict[str, Any]:
    if record["id"] == 3:
        raise ValueError(f"record {record['id']} is cursed")
    return record


def returns_a_list(record: dict[str, Any]) -> Any:
    return [record]


def keep_even_rows(record: dict[str, Any]) -> dict[str, Any] | None:
    """Keep rows whose text's second word is an even number."""
    return record if int(record["text"].split()[1]) % 2 == 0 else None
