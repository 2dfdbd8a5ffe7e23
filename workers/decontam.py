"""Decontamination: drop the documents that share an n-gram of words with an evaluation set.

Words are what is left of a text lowercased, with punctuation and symbols deleted (everything
but letters, digits and whitespace: ``"Don't!"`` is ``dont``), split at whitespace, so a leak
written over a line break or in another case still matches. A document is dropped when any
``n`` consecutive words of it (default 13) are ``n`` consecutive words of an eval item.

Matching is exact: runs of words are hashed to 64 bits only to find candidates fast (a sorted
array of hashes from the eval set, reached through a table and a directory of their top bits),
and every candidate is compared word for word with the eval item's n-gram before a document is
dropped. A hash collision therefore costs one comparison and never drops a document (a Bloom
filter, as Dolma's, drops on a false positive); equal runs always hash equal, so no leak is
missed.

The index holds a sample, not every n-gram: with a stride ``s`` (`_stride`, 3 for n = 13), the
runs of ``m = n - s + 1`` words that start at every s-th word of the eval texts. Any n words an
eval item has contain one of those runs whole (the one that starts at the first sampled word
among their first ``s``), so a document that shares an n-gram shares that run, at some word of
the document: every run of m words of a document is looked up, and each one found is widened
back by 0 to ``s - 1`` words and compared as n-grams. The index is ``s`` times smaller to
build, sort and send, and its table small enough to stay in a core's cache while documents are
looked up.

The hashes are computed with NumPy over a batch of documents at once (uint64 arithmetic wraps):
a word's from its bytes, read 8 at a time and mixed; an n-gram's from its words' hashes,
polynomially. The eval set is read once by the driver (`prepare`), and travels to the tasks
inside the job's config (`attach`); a part run outside the driver builds it itself (`checker`).
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from guideloom.errors import IngestError
from guideloom.io import redact_url
from guideloom.types import BadRecord, ReadOptions

__all__ = [
    "DEFAULT_NGRAM",
    "EvalIndex",
    "Match",
    "attach",
    "build_index",
    "checker",
    "ngram_hashes",
    "normalized",
    "prepare",
    "recorded",
    "screen",
]

DEFAULT_NGRAM = 13
CONTAMINATED = "contaminated"  # the reason a dropped document is counted and listed under

_MASK = (1 << 64) - 1
_WORD_BASE = 0x9E3779B97F4A7C15  # the golden-ratio constant, odd
TABLE_MAX_BITS = 29  # the pre-check table: at most 64 MiB (one bit per slot)
_TABLE_CHUNK = 1 << 14  # hashes handled at once when the index's keys and table are built

# ASCII: what a text keeps are letters, digits and whitespace (the non-ASCII path, a regular
# expression, agrees on every ASCII character: `_ascii_tables` is built from it).
_NOT_WORD = re.compile(r"[^\w\s]|_")


def _ascii_tables() -> tuple[bytes, bytes, np.ndarray]:
    """What the ASCII path deletes, its table (every whitespace character becomes a space, as
    ``str.split`` sees whitespace), and which bytes are spaces."""
    deleted = bytes(c for c in range(128) if _NOT_WORD.fullmatch(chr(c)))
    # (capitals become small letters here too: one pass over the bytes, not str.lower first)
    table = bytes(32 if chr(c).isspace() else ord(chr(c).lower()) if c < 128 else c for c in range(256))
    space = np.zeros(256, dtype=bool)
    space[32] = True
    return deleted, table, space


_DELETED, _TABLE, _SPACE = _ascii_tables()
assert set(string.punctuation.encode()) <= set(_DELETED)


def normalized(text: str) -> bytes:
    """The text as matching sees it: lowercased, punctuation and symbols deleted, UTF-8; words
    are separated by spaces (every whitespace character becomes one)."""
    if text.isascii():
        return text.encode("ascii").translate(_TABLE, _DELETED)
    return " ".join(_NOT_WORD.sub("", text.lower()).split()).encode("utf-8", "surrogatepass")


_DELETED_BUT_NUL = _DELETED.replace(b"\x00", b"")


def normalized_all(texts: Sequence[str]) -> list[bytes]:
    """`normalized` of each text; a batch of ASCII texts without NUL in a few calls over the
    batch joined by NULs (which `normalized` would delete, so kept here as the separator)."""
    joined = "\x00".join(texts)
    if len(texts) > 1 and joined.isascii() and joined.count("\x00") == len(texts) - 1:
        return joined.encode("ascii").translate(_TABLE, _DELETED_BUT_NUL).split(b"\x00")
    return [normalized(t) for t in texts]


def words(data: bytes) -> list[bytes]:
    """The words of a `normalized` text."""
    return data.split()


# _LOW[k]: a mask of the low k bytes of a uint64 (k = 0..8; read with mode="clip", so any k > 8
# is 8): the bytes of a word read 8 at a time
_LOW = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [_MASK], dtype=np.uint64)
_CHUNK_BASE = np.uint64(0x100000001B3)  # FNV's 64-bit prime: a word's 8-byte chunks are combined by it
# splitmix64's two multipliers: a word's hash is multiplied by the first and its high half folded
# into its low half; the n-gram's sum is multiplied by the second (`_combine`, inside its powers)
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_PAD = 8  # spaces after a text whose words are hashed: a word's last 8-byte load stays inside it


def _word_spans(data: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(the bytes, start of each word, end of each word) of a normalized text (or a batch of
    them joined by spaces): a `normalized` text separates words by spaces only (a UTF-8 byte of
    a longer character is never 32). One pass finds where space and word bytes alternate."""
    space = np.ones(len(data) + 2, dtype=bool)  # a space before the first byte and after the last
    np.equal(np.frombuffer(data, dtype=np.uint8), 32, out=space[1:-1])
    edges = np.flatnonzero(space[1:] != space[:-1])  # alternately a word's start and its end
    return data, edges[0::2], edges[1::2]


def _word_hashes(data: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """One 64-bit hash per word, from its bytes read 8 at a time (unaligned little-endian
    uint64 loads at the word's start, the bytes past its end masked off), the chunks of a longer
    word combined polynomially, then the length mixed in, the whole multiplied by an odd
    constant and its high half folded into its low half. Each step after the loads is one-to-one,
    and a normalized text holds no zero byte, so words of up to 8 bytes hash apart; a longer
    word can collide (64-bit overflow), and matching compares words anyway. ``data`` ends with at
    least `_PAD` - 1 bytes after its last word (spaces), where that word's loads may read."""
    if starts.size == 0:
        return np.zeros(0, dtype=np.uint64)
    loads = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    lengths = ends - starts
    h = loads[starts]
    h &= _LOW.take(lengths, mode="clip")
    offset = 8
    longer = np.flatnonzero(lengths > offset)
    while longer.size:  # words of more than 8 bytes, one more chunk a round
        rest = lengths[longer] - offset
        h[longer] = h[longer] * _CHUNK_BASE + (loads[starts[longer] + offset] & _LOW.take(rest, mode="clip"))
        offset += 8
        longer = longer[rest > 8]
    h ^= lengths.view(np.uint64) << np.uint64(56)
    h *= np.uint64(_MIX1)
    h ^= h >> np.uint64(32)
    return h


_POWERS_LOCK = threading.Lock()
_powers = (np.ones(0, dtype=np.uint64), np.ones(0, dtype=np.uint64))  # B**k and M * B**-k, k = 0, 1, ...


_COMBINE_CHUNK = 1 << 20  # n-grams hashed at once: the powers kept are at most this many, plus n


def _base_powers(size: int) -> tuple[np.ndarray, np.ndarray]:
    """``B**k`` and ``M * B**-k`` (mod 2**64) for ``k < size`` at least, ``M`` = `_MIX2`; ``B``
    is odd, so it has an inverse mod 2**64. Grown by doubling and kept (at most
    `_COMBINE_CHUNK` + n of each: 16 MiB in all for the default n)."""
    global _powers
    up, down = _powers
    if up.size < size:
        with _POWERS_LOCK:
            up, down = _powers
            if up.size < size:
                grown = max(size, 2 * up.size)
                up, down = np.empty(grown, dtype=np.uint64), np.empty(grown, dtype=np.uint64)
                up[0] = down[0] = 1
                up[1:] = np.uint64(_WORD_BASE)
                down[1:] = np.uint64(pow(_WORD_BASE, -1, 1 << 64))
                down[0] = _MIX2
                np.multiply.accumulate(up, out=up)  # (uint64 products wrap: mod 2**64)
                np.multiply.accumulate(down, out=down)
                _powers = (up, down)
    return up, down


def _combine(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """The hash of each run of ``n`` consecutive words (``len - n + 1`` of them): for the run
    at ``i``, ``M * sum(h[i + j] * B**(n - 1 - j) for j < n)`` mod 2**64, ``M`` = `_MIX2` (the
    last multiply of the words' mixing, shared by the run). Computed from one prefix sum of
    ``h[k] * M * B**-k``: the run's sum is a difference of two prefix sums, times
    ``B**(i + n - 1)``; four passes over the words, whatever ``n``. A text of more words is
    hashed `_COMBINE_CHUNK` n-grams at a time."""
    size = word_hashes.size
    count = size - n + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    if count > _COMBINE_CHUNK:
        return np.concatenate(
            [
                _combine(word_hashes[c : c + _COMBINE_CHUNK + n - 1], n)
                for c in range(0, count, _COMBINE_CHUNK)
            ]
        )
    up, down = _base_powers(size)
    prefix = np.empty(size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.multiply(word_hashes, down[:size], out=prefix[1:])
    np.cumsum(prefix, out=prefix)
    out = prefix[n:] - prefix[:count]
    out *= up[n - 1 : n - 1 + count]
    return out


def ngram_hashes(data: bytes, n: int) -> np.ndarray:
    """The hash of every n-gram of one normalized text, in order."""
    data, starts, ends = _word_spans(data + b" " * _PAD)
    return _combine(_word_hashes(data, starts, ends), n)


@dataclass
class _Batch:
    """Normalized texts joined by spaces, their words, and their n-grams: ``grams[g]`` is the
    n-gram that starts at word ``g``; ``ok[g]`` where it lies inside one text."""

    joined: bytes
    starts: np.ndarray
    ends: np.ndarray
    first_word: np.ndarray  # each text's first word
    grams: np.ndarray
    ok: np.ndarray

    def text_of(self, word: np.ndarray) -> np.ndarray:
        """The text each of ``word`` (word indices) belongs to."""
        return np.searchsorted(self.first_word, word, side="right") - 1


_PADDING = [b""] * _PAD  # joined after a batch's texts: `_PAD` spaces after its last word


def _batch(data: list[bytes], n: int) -> _Batch:
    joined = b" ".join(data + _PADDING)
    _, starts, ends = _word_spans(joined)
    doc_starts = np.cumsum([0] + [len(d) + 1 for d in data[:-1]])
    first_word = np.searchsorted(starts, doc_starts)
    grams = _combine(_word_hashes(joined, starts, ends), n)
    # An n-gram crosses into the next text when that text's first word is one of its last n - 1
    ok = np.ones(grams.size, dtype=bool)
    if grams.size and len(data) > 1:
        if (len(data) - 1) * (n - 1) <= 4 * grams.size:
            crossing = (first_word[1:, None] - np.arange(1, n)).ravel()
            ok[crossing[(crossing >= 0) & (crossing < grams.size)]] = False
        else:  # many short texts and a long n: compare each n-gram's first and last word's text
            word_text = np.repeat(np.arange(len(data)), np.diff(first_word, append=starts.size))
            ok = word_text[: grams.size] == word_text[n - 1 :]
    return _Batch(joined, starts, ends, first_word, grams, ok)


class EvalItem(NamedTuple):
    """Where an eval item is: its file (as shown), line or row, and the field read. A tuple of
    strings, ints and None: quick to make and to pickle, and not walked by the garbage
    collector once it has seen it (an eval set has one per item, held for the whole job)."""

    file: str
    line: int | None
    row: int | None
    field: str

    def describe(self) -> str:
        where = f"row {self.row}" if self.row is not None else f"line {self.line}"
        return f"{self.file} {where} ({self.field})"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "field": self.field}
        if self.row is not None:
            out["row"] = self.row
        else:
            out["line"] = self.line
        return out


@dataclass(frozen=True)
class Match:
    """Why a document is dropped: the eval item it shares an n-gram with, and the n-gram."""

    item: EvalItem
    ngram: str

    def message(self, n: int) -> str:
        return f"shares the {n}-gram {self.ngram!r} with eval item {self.item.describe()}"


def _sorting_order(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The permutation that sorts ``hashes`` (what `numpy.argsort` gives, ties in any order) and
    the sorted hashes, from a plain sort, several times faster: each hash's low bits are replaced
    by its index, the keys sorted in place, and the indices read back; hashes equal in their top
    bits but not the rest (rare) may come out of order, and then `numpy.argsort` decides. Works in
    place and in small pieces: large temporaries cost more in page faults than the sort itself."""
    bits = max(1, int(hashes.size).bit_length())
    if hashes.size < 2 or bits > 40:
        order = np.argsort(hashes)
        return order, hashes[order]
    low = np.uint64((1 << bits) - 1)
    keys = np.arange(hashes.size, dtype=np.uint64)
    for c in range(0, hashes.size, _TABLE_CHUNK):
        keys[c : c + _TABLE_CHUNK] |= hashes[c : c + _TABLE_CHUNK] & ~low
    keys.sort()
    keys &= low
    order = keys.view(np.int64)  # the indices (< 2**40)
    ranked = hashes[order]
    if bool((ranked[1:] < ranked[:-1]).any()):
        order = np.argsort(hashes)
        return order, hashes[order]
    return order, ranked


def _batch_bounds(texts: Sequence[bytes]) -> list[tuple[int, int]]:
    """``(first, end)`` of consecutive batches of ``texts``: each at least one text, and more
    while their bytes and a separator each stay within `SCREEN_CHARS`."""
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)) + 1)
    bounds, k = [], 0
    while k < len(texts):
        base = int(ends[k - 1]) if k else 0
        # the texts whose end lies within the budget, counted from this batch's first one
        j = max(k + 1, int(np.searchsorted(ends, base + SCREEN_CHARS + 1, side="right")))
        bounds.append((k, j))
        k = j
    return bounds


def _stride(n: int) -> int:
    """Every how many words of the eval texts a run is indexed, for n-grams of ``n`` words: the
    runs indexed are ``n - stride + 1`` words long (10 of 13 would allow a stride of 4; 3 keeps
    runs of 11 words, long enough that runs shared by chance stay rare)."""
    return max(1, n // 4)


class EvalIndex:
    """A sample of an eval set's runs of words (see the module's docstring): sorted hashes, and
    for each where it starts (a word of the eval texts, counted through all of them), plus each
    item's words to confirm a candidate. Picklable (Ray sends it to tasks)."""

    def __init__(self, n: int, items: list[EvalItem], texts: list[bytes], sources: list[str]) -> None:
        self.n = n
        self.stride = _stride(n)
        self.run = n - self.stride + 1  # the words of each run indexed and looked up
        self.items = items
        self.texts = texts  # `normalized`: words separated by spaces
        self.sources = sources
        hashes, starts, counts = [], [], []
        before = 0  # words of the batches before
        for k, j in _batch_bounds(texts):  # batches of about SCREEN_CHARS bytes
            batch = _batch(texts[k:j], self.run)
            sampled = np.arange(-before % self.stride, batch.grams.size, self.stride)
            keep = sampled[batch.ok[sampled]]  # (runs inside one text)
            hashes.append(batch.grams[keep])
            starts.append(keep + before)
            counts.append(np.diff(batch.first_word, append=batch.starts.size))  # words per text
            before += batch.starts.size
        all_hashes = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
        # ties in any order: `check` names the first item that matches
        order, self.hashes = _sorting_order(all_hashes)
        where = np.concatenate(starts) if starts else np.zeros(0, dtype=np.int64)
        self.word = where[order].astype(np.int32 if before < 2**31 else np.int64)
        words = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
        self.first_word = np.concatenate(([0], np.cumsum(words)))  # each text's, through them all
        self._filter: tuple[np.ndarray, np.uint64, np.ndarray, np.uint64] | None = None
        self.usable = int((words >= n).sum())
        self._ngrams = int(np.maximum(words - (n - 1), 0).sum())
        digest = hashlib.sha256(f"ngram={n}\n".encode())
        if texts:  # each text and a newline (the join, and its last newline apart: no second copy)
            digest.update(b"\n".join(texts))
            digest.update(b"\n")
        self.sha256 = digest.hexdigest()

    @property
    def ngrams(self) -> int:
        """How many n-grams the eval items have (more than the runs indexed)."""
        return self._ngrams

    def describe(self) -> dict[str, Any]:
        """What the manifest records of the eval set (and the plan digest hashes)."""
        return {
            "eval": list(self.sources),
            "ngram": self.n,
            "items": len(self.items),
            "items_too_short": len(self.items) - self.usable,
            "ngrams": self.ngrams,
            "sha256": self.sha256,
        }

    def _table(self) -> tuple[np.ndarray, np.uint64, np.ndarray, np.uint64]:
        """A bitmap indexed by a hash's top bits: set where some eval n-gram's hash has them
        (about 1 in 16 bits set); and a directory of the sorted hashes by 6 fewer top bits
        (2-3 hashes a slot): the hashes with top bits ``t`` are ``hashes[start[t]:start[t + 1]]``.
        Built on first use in each process, never pickled. Both are kept small (a bit per
        slot, not a byte): what they cost to build is mostly the first touch of fresh memory,
        which is slow and varies a lot on virtual machines."""
        if self._filter is None:
            bits = max(16, min(TABLE_MAX_BITS, int(np.ceil(np.log2(max(1, self.hashes.size) * 16)))))
            shift = np.uint64(64 - bits)
            table = np.zeros(1 << (bits - 3), dtype=np.uint8)
            slots = bits - 6
            slot_shift = np.uint64(64 - slots)
            # the directory: each slot's first index in the sorted hashes, from each slot's count
            dtype = np.int32 if self.hashes.size < 2**31 else np.int64
            start = np.zeros((1 << slots) + 1, dtype=dtype)
            for c in range(0, self.hashes.size, _TABLE_CHUNK):  # pieces: no large temporaries
                top = self.hashes[c : c + _TABLE_CHUNK] >> shift  # sorted, as the hashes are
                bit = np.left_shift(np.uint8(1), (top & np.uint64(7)).astype(np.uint8))
                np.bitwise_or.at(table, top >> np.uint64(3), bit)
                slot = (top >> np.uint64(6)).astype(np.intp)  # (a slot is 8 bytes of the bitmap)
                first = int(slot[0])
                counts = np.bincount(slot - first)  # the slots this piece spans, from its first
                start[first + 1 : first + 1 + counts.size] += counts.astype(dtype)
            np.cumsum(start, out=start)
            self._filter = (table, shift, start, slot_shift)
        return self._filter

    def _maybe(self, grams: np.ndarray) -> np.ndarray:
        """Whether each n-gram hash's bit is set in the table (False: no eval n-gram has it)."""
        table, shift, _, _ = self._table()
        top = grams >> shift
        bits = table[top >> np.uint64(3)] >> (top & np.uint64(7)).astype(np.uint8)
        return (bits & np.uint8(1)).view(bool)

    def _first_at(self, candidates: np.ndarray) -> np.ndarray:
        """For each hash, the index of its first occurrence in the sorted hashes, or -1 (what
        `numpy.searchsorted` finds, from the directory: a slot or two read per hash)."""
        _, _, start, slot_shift = self._table()
        slot = (candidates >> slot_shift).astype(np.intp)
        low = start[slot]
        width = start[slot + 1] - low
        at = np.full(candidates.size, -1, dtype=np.int64)
        live = np.flatnonzero(width > 0)
        j = 0
        while live.size:  # the j-th hash of each slot not yet matched
            index = low[live] + j
            hit = self.hashes[index] == candidates[live]
            at[live[hit]] = index[hit]  # equal hashes are adjacent: the first one seen is the first
            j += 1
            live = live[~hit & (width[live] > j)]
        return at

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_filter"] = None
        return state

    def _run_at(self, i: int) -> tuple[int, int]:
        """The eval item whose run is the ``i``-th sorted hash, and the word it starts at."""
        word = int(self.word[i])
        k = int(np.searchsorted(self.first_word, word, side="right")) - 1
        return k, word - int(self.first_word[k])

    def check(self, texts: Sequence[str]) -> list[Match | None]:
        """For each text, the first n-gram (in text order) that an eval item has, or None; of
        the eval items that have it, the first is named."""
        out: list[Match | None] = [None] * len(texts)
        if not texts or self.hashes.size == 0:
            return out
        batch = _batch(normalized_all(texts), self.run)
        grams, ok = batch.grams, batch.ok
        starts, ends, joined = batch.starts, batch.ends, batch.joined
        if grams.size == 0:
            return out
        # A table of the hashes' top bits first (one random read per run), so that only the few
        # runs it lets through are looked up in the sorted hashes (its directory slot, a read or two each).
        maybe = np.flatnonzero(ok & self._maybe(grams))
        at = self._first_at(grams[maybe])
        found_at = at >= 0
        hits = maybe[found_at]
        if hits.size == 0:
            return out
        n, back = self.n, self.stride - 1

        def words_at(p: int) -> list[bytes]:  # the document's n words from word p
            return [joined[s:e] for s, e in zip(starts[p : p + n].tolist(), ends[p : p + n].tolist())]

        text_end = np.append(batch.first_word[1:], starts.size)  # each text's words end there
        best: dict[int, tuple[int, int]] = {}  # text -> (first word of its first n-gram, item)
        for g, i, doc in zip(hits.tolist(), at[found_at].tolist(), batch.text_of(hits).tolist()):
            prior = best.get(doc)
            if prior is not None and g - back > prior[0]:
                continue  # what this run is part of starts after the n-gram found
            first, end = int(batch.first_word[doc]), int(text_end[doc])
            while i < self.hashes.size and self.hashes[i] == grams[g]:
                k, start = self._run_at(i)
                item = self.texts[k].split()
                for a in range(min(back, g - first, start) + 1):  # n-grams with this run a words in
                    p, r = g - a, start - a
                    if p + n > end or r + n > len(item) or (prior is not None and (p, k) >= prior):
                        continue
                    if words_at(p) == item[r : r + n]:
                        prior = (p, k)  # (a hash collision is compared, never dropped)
                i += 1
            if prior is not None:
                best[doc] = prior
        for doc, (p, k) in best.items():
            out[doc] = Match(self.items[k], b" ".join(words_at(p)).decode("utf-8", "replace"))
        return out


# -- reading the eval set --------------------------------------------------------------------


@dataclass(frozen=True)
class EvalSource:
    """One entry of ``decontaminate``: files (a path, glob, folder or URL) and the field read."""

    path: str
    field: str


def sources_of(config: Any) -> list[EvalSource]:
    """The eval sources a job names: strings use ``decontaminate_field``; a mapping
    ``{"path": ..., "field": ...}`` names its own field."""
    out = []
    for entry in config.decontaminate:
        if isinstance(entry, str):
            out.append(EvalSource(entry, config.decontaminate_field))
        else:
            out.append(EvalSource(str(entry["path"]), str(entry.get("field", config.decontaminate_field))))
    return out


def _item_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)  # a list of strings (answer choices): one text, words in order
    return None


_JSON = json.JSONDecoder()  # what `json.loads` uses
_JSON_SPACE = " \t\n\r"  # what JSON counts as whitespace


def _jsonl_fast(f: Any, field: str, read_options: ReadOptions) -> list[tuple[int, None, str]] | None:
    """(line, None, text) of every record of a JSON Lines eval file, read without a record
    object per line: the same lines, values and line numbers as the reader gives. None at the
    first line the reader would not take as it is (not UTF-8, not JSON, not an object, without
    the field or text in it): the caller then reads the file again the reader's way, which names
    the line and the cause."""
    from guideloom.workers.readers import input_reader
    from guideloom.workers.sources import Segment

    out: list[tuple[int, None, str]] = []
    decode = _JSON.raw_decode
    lines = input_reader("jsonl").lines(f, Segment(0, 0, f.size, True), read_options)  # type: ignore[attr-defined]
    for line, (_, raw) in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8")
            if not text.strip():
                continue  # a blank line: no item (the reader's empty document)
            obj, end = decode(text, len(text) - len(text.lstrip(_JSON_SPACE)))
        except (ValueError, RecursionError):  # (JSONDecodeError and UnicodeDecodeError are ValueErrors)
            return None
        if text[end:].strip(_JSON_SPACE) or not isinstance(obj, dict) or field not in obj:
            return None
        value = _item_text(obj[field])
        if value is None:
            return None
        out.append((line, None, value))
    return out


def _records(f: Any, field: str, options: dict[str, Any]) -> Iterator[tuple[int | None, int | None, str]]:
    """(line, row, text) of every record of one eval file, in file order."""
    from guideloom.types import Document
    from guideloom.workers.readers import input_reader
    from guideloom.workers.sources import Segment

    shown = redact_url(f.url)
    if f.kind not in ("jsonl", "parquet"):
        raise IngestError(
            f"eval file {shown} is {f.kind}: --decontaminate reads JSON Lines or Parquet files "
            "(one eval item per record): convert it, or name only .jsonl / .parquet files"
        )
    read_options = ReadOptions(field, False, (), options)
    if f.kind == "jsonl":
        fast = _jsonl_fast(f, field, read_options)
        if fast is not None:
            yield from fast
            return
    for item in input_reader(f.kind).read(f, Segment(0, 0, f.size, True), read_options):
        if isinstance(item, Document):  # a blank line
            continue
        if isinstance(item, BadRecord):
            where = f"line {item.line}" if item.line is not None else f"byte {item.offset}"
            raise IngestError(f"eval file {shown} {where}: {item.detail}; fix or remove that line")
        where = f"row {item.row}" if item.row is not None else f"line {item.line}"
        if field not in item.data:
            fields = ", ".join(sorted(map(str, item.data))[:12]) or "none"
            raise IngestError(
                f"eval file {shown} {where} has no field {field!r} (its fields: {fields}); name "
                "the field that holds the eval text: --decontaminate-field FIELD (or "
                "decontaminate=[{'path': ..., 'field': FIELD}] in Python or a job file)"
            )
        text = _item_text(item.data[field])
        if text is None:
            raise IngestError(
                f"eval file {shown} {where}: field {field!r} holds {type(item.data[field]).__name__}, "
                "not text (a string or a list of strings); name a text field with --decontaminate-field"
            )
        yield item.line, item.row, text


def build_index(config: Any) -> EvalIndex:
    """Read the job's eval set and index its n-grams.

    Raises:
        IngestError: An eval path that does not exist or matches nothing, a file that is not
            JSON Lines or Parquet, a record without the field (or not text there), an eval set
            with no item, or none with as many words as the n-gram.
    """
    from guideloom.workers.sources import expand_inputs

    n = config.decontaminate_ngram
    options = dict(config.input_storage_options)
    items: list[EvalItem] = []
    raw_texts: list[str] = []
    shown_sources = []
    for source in sources_of(config):
        shown_sources.append(f"{redact_url(source.path)}#{source.field}")
        try:
            files = expand_inputs([source.path], "auto", options)
        except IngestError as err:
            raise IngestError(f"--decontaminate: {err}") from None
        for f in files:
            shown = redact_url(f.url)
            for line, row, text in _records(f, source.field, options):
                items.append(EvalItem(shown, line, row, source.field))
                raw_texts.append(text)
    texts = normalized_all(raw_texts)
    paths = ", ".join(redact_url(s.path) for s in sources_of(config))
    if not items:
        raise IngestError(
            f"the eval set ({paths}) holds no item: every file is empty. Point --decontaminate at "
            "the files that hold the eval items (JSON Lines or Parquet, one item per record)"
        )
    index = EvalIndex(n, items, texts, shown_sources)
    if index.usable == 0:
        longest = max(len(t.split()) for t in texts)
        raise IngestError(
            f"no item of the eval set ({paths}; {len(items)} items) has {n} words, so no "
            f"{n}-gram can match: the longest has {longest}. Lower --decontaminate-ngram (e.g. "
            f"--decontaminate-ngram {max(1, min(longest, 8))}), or check --decontaminate-field"
        )
    return index


_ATTACHED = "_eval_index"


def prepare(config: Any) -> tuple[Any, dict[str, Any]]:
    """In the driver, before any task: read the eval set (named errors), and return the config
    that carries it to the tasks and what the plan digest adds (the eval set's hash).
    A job without ``decontaminate`` is returned as it is."""
    if not config.decontaminate:
        return config, {}
    index = build_index(config)
    return attach(config, index), {"decontaminate": index.describe()}


def attach(config: Any, index: EvalIndex) -> Any:
    """A copy of the config that carries ``index`` (a private attribute: not an option, not
    in the job's identity, pickled with the config when Ray sends it)."""
    copy = config.model_copy()
    setattr(copy, _ATTACHED, index)
    return copy


_built: dict[str, EvalIndex] = {}  # per process, for parts run without the driver


def checker(config: Any) -> EvalIndex | None:
    """The eval index of a job (None without ``decontaminate``): the one the driver attached,
    else built here once per process."""
    if not config.decontaminate:
        return None
    attached = getattr(config, _ATTACHED, None)
    if attached is not None:
        return attached  # type: ignore[no-any-return]
    key = json.dumps(
        [config.decontaminate, config.decontaminate_field, config.decontaminate_ngram],
        sort_keys=True,
        default=str,
    )
    if key not in _built:
        _built[key] = build_index(config)
    return _built[key]


SCREEN_DOCS = 512  # documents checked at once (NumPy's per-call cost spread over a batch)
SCREEN_CHARS = 2**20


class Screen:
    """Checks a part's documents in batches, in order: each clean one goes on to ``keep``, each
    contaminated one is counted per input file and listed in the part's rejects."""

    def __init__(
        self, index: EvalIndex, keep: Callable[[Any], None], rejected: Any, counts: Counter[str]
    ) -> None:
        self.index = index
        self.keep = keep
        self.rejected = rejected
        self.counts = counts
        self.items: list[Any] = []
        self.where: list[tuple[Any, Any, int, Any]] = []
        self.chars = 0

    def add(self, item: Any, where: tuple[Any, Any, int, Any]) -> None:
        """``item`` has the ``text`` checked and the ``url`` counted; ``where`` is (input file,
        segment, index of the record in it, the record as read)."""
        self.items.append(item)
        self.where.append(where)
        self.chars += len(item.text)
        if len(self.items) >= SCREEN_DOCS or self.chars >= SCREEN_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        items, where = self.items, self.where
        self.items, self.where, self.chars = [], [], 0
        matches = self.index.check([item.text for item in items])
        n = self.index.n
        for item, at, match in zip(items, where, matches):
            if match is None:
                self.keep(item)
                continue
            self.counts[item.url] += 1
            f, seg, k, raw = at
            extra = {"eval": match.item.as_json(), "ngram": match.ngram}
            self.rejected.add(f, seg, k, CONTAMINATED, match.message(n), raw, extra)


def screen(config: Any, keep: Callable[[Any], None], rejected: Any, counts: Counter[str]) -> Screen | None:
    """The job's `Screen` (None without ``decontaminate``: documents go straight to ``keep``)."""
    index = checker(config)
    return None if index is None else Screen(index, keep, rejected, counts)


def recorded(config: Any) -> dict[str, Any] | None:
    """What the manifest records of the job's eval set (None without ``decontaminate``)."""
    index = checker(config)
    return None if index is None else index.describe()
