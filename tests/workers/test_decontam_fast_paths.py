"""Decontamination's fast paths give what the plain ones give: batch normalization, word hashes
read 8 bytes at a time (words longer than a chunk), the sort order of the eval hashes, the
pre-check bitmap and directory of the sorted hashes, and the eval JSON Lines read without a
record object per line (line numbers, blank lines, bad lines); n-gram hashes from prefix sums,
and which of a batch's n-grams lie inside one text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from guideloom.errors import IngestError
from guideloom.workers import decontam
from guideloom.workers.config import IngestConfig


def test_a_batch_normalizes_as_each_text_does():
    batches = [
        ["Hello, World!", "Don't\tstop_me.", "", "  spaced  out  "],  # ASCII: one pass
        ["a\x00b", "c"],  # a NUL in a text: text by text
        ["Café, “Hello”", "plain text"],  # non-ASCII: text by text
        ["one"],
        [],
    ]
    for texts in batches:
        assert decontam.normalized_all(texts) == [decontam.normalized(t) for t in texts], texts


def test_long_words_differing_past_a_chunk_do_not_match():
    # words of 8, 9, 16, 17 and 20 bytes: the hash reads them 8 bytes at a time
    words = ["abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefghijklmnopq", "supercalifragilistic"]
    item = " ".join(words)
    index = decontam.EvalIndex(
        len(words), [decontam.EvalItem("eval.jsonl", 1, None, "q")], [decontam.normalized(item)], ["e#q"]
    )
    assert index.check([item])[0] is not None
    for k, word in enumerate(words):
        for changed in (word[:-1] + "x", word + "x", word[:-1]):  # last byte, one more, one fewer
            doc = " ".join([*words[:k], changed, *words[k + 1 :]])
            assert index.check([doc]) == [None], doc


def test_n_gram_hashes_from_prefix_sums_equal_the_polynomial_and_stay_within_a_text():
    rng = np.random.default_rng(9)
    base, mask = decontam._WORD_BASE, (1 << 64) - 1
    for n in (1, 2, 5, 13, 40):
        for size in (0, 1, n - 1, n, n + 1, 300):
            words = rng.integers(0, 2**63, size, dtype=np.int64).astype(np.uint64) * np.uint64(3)
            expected = []
            for i in range(size - n + 1):  # the definition, one n-gram at a time
                h = 0
                for j in range(n):
                    h = (h * base + int(words[i + j])) & mask
                expected.append(h * decontam._MIX2 & mask)  # the words' last multiply, shared
            assert decontam._combine(words, n).tolist() == expected, (n, size)
    # texts of 0, 1, 3 and 6 words (and empty ones between): an n-gram that reaches into the
    # next text is not one of a text's own
    texts = [b"", b"a b c d e f", b"", b"g", b"h i j", b""]
    batch = decontam._batch(texts, 3)
    owner = batch.text_of(np.arange(batch.starts.size))
    assert owner.tolist() == [1] * 6 + [3] + [4] * 3
    own = [bool(owner[g] == owner[g + 2]) for g in range(batch.grams.size)]
    assert batch.ok.tolist() == own
    assert batch.ok.sum() == 4 + 1  # a-b-c .. d-e-f, and h-i-j
    # many one-word texts and a long n-gram: the other way of finding the crossings agrees
    many = [b"w%d" % k for k in range(50)] + [b" ".join(b"x%d" % k for k in range(30))]
    wide = decontam._batch(many, 20)
    words_text = wide.text_of(np.arange(wide.starts.size))
    assert wide.ok.tolist() == [bool(words_text[g] == words_text[g + 19]) for g in range(wide.grams.size)]
    assert wide.ok.sum() == 30 - 20 + 1


def test_a_text_longer_than_a_chunk_is_hashed_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    words = rng.integers(0, 2**63, 1000, dtype=np.int64).astype(np.uint64)
    whole = decontam._combine(words, 13)
    monkeypatch.setattr(decontam, "_COMBINE_CHUNK", 37)  # 988 n-grams: 27 chunks, the last one short
    assert np.array_equal(decontam._combine(words, 13), whole)


def test_the_eval_hashes_sort_as_argsort_sorts_them():
    rng = np.random.default_rng(5)
    top = np.uint64(0xFFFF_FFFF_0000_0000)
    cases = [
        rng.integers(0, 2**63, 5000, dtype=np.int64).astype(np.uint64) * np.uint64(3),
        np.array([7, 7, 3, 2**64 - 1, 0, 3], dtype=np.uint64),  # ties and the extremes
        (rng.integers(0, 2**63, 3000, dtype=np.int64).astype(np.uint64) & ~top) | top,  # equal top bits
        np.zeros(0, dtype=np.uint64),
    ]
    for hashes in cases:
        order, ranked = decontam._sorting_order(hashes)
        assert sorted(order.tolist()) == list(range(hashes.size))
        assert np.array_equal(hashes[order], np.sort(hashes))
        assert np.array_equal(ranked, np.sort(hashes))


@pytest.mark.parametrize("piece", [decontam._TABLE_CHUNK, 1000, 7])
def test_the_bitmap_and_directory_find_exactly_the_eval_hashes(monkeypatch: pytest.MonkeyPatch, piece: int):
    # the pre-check bitmap (a bit per slot of the top bits) lets through every eval n-gram's hash
    # and, of other hashes, exactly those whose top bits some eval hash has; the directory then
    # finds each eval hash's first place in the sorted array, as searchsorted does (built in
    # pieces of `piece` hashes: a slot's hashes may lie in two pieces)
    monkeypatch.setattr(decontam, "_TABLE_CHUNK", piece)
    rng = np.random.default_rng(11)
    vocabulary = [f"w{k}" for k in range(3000)]
    texts = [" ".join(rng.choice(vocabulary, int(rng.integers(5, 60)))) for _ in range(400)]
    items = [decontam.EvalItem("eval.jsonl", k + 1, None, "q") for k in range(len(texts))]
    index = decontam.EvalIndex(4, items, [decontam.normalized(t) for t in texts], ["e#q"])
    index.hashes = np.sort(np.concatenate([index.hashes, index.hashes[::5]]))  # some equal hashes
    table, shift, _, _ = index._table()
    present = set((index.hashes >> shift).tolist())
    others = rng.integers(0, 2**63, 50_000, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    near = index.hashes ^ np.uint64(1)  # the same top bits as an eval hash, another hash
    for probe in (index.hashes, others, near, np.zeros(0, dtype=np.uint64)):
        expected = np.array([int(t) in present for t in (probe >> shift).tolist()], dtype=bool)
        assert np.array_equal(index._maybe(probe), expected)
    assert index._maybe(index.hashes).all()
    at = index._first_at(np.concatenate([index.hashes, others]))
    first = np.searchsorted(index.hashes, index.hashes)
    assert np.array_equal(at[: index.hashes.size], first)
    missing = ~np.isin(others, index.hashes)
    assert (at[index.hashes.size :][missing] == -1).all()


def _config(tmp_path, path) -> IngestConfig:
    return IngestConfig(
        inputs=[str(tmp_path / "x.jsonl")],
        output=str(tmp_path / "out"),
        decontaminate=[str(path)],
        decontaminate_field="q",
        decontaminate_ngram=1,
    )


def test_eval_lines_are_numbered_as_the_reader_numbers_them(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_bytes(
        b"\n"
        + json.dumps({"q": "first item"}).encode()
        + b"\r\n   \t\n"
        + b'  {"q": ["a list", "of texts"], "other": 1}  \n'
        + json.dumps({"q": "caf\u00e9 last"}, ensure_ascii=False).encode()  # no final newline
    )
    index = decontam.build_index(_config(tmp_path, path))
    assert [item.line for item in index.items] == [2, 4, 5]
    assert index.texts == [b"first item", b"a list of texts", "café last".encode()]
    # a bad line after good ones: the reader's named error, with its line number
    path.write_text(json.dumps({"q": "fine"}) + "\n" + '{"q": "x"} trailing\n')
    with pytest.raises(IngestError, match=r"eval.jsonl line 2: malformed JSON"):
        decontam.build_index(_config(tmp_path, path))
    path.write_bytes(json.dumps({"q": "fine"}).encode() + b'\n{"q": "\xff"}\n')
    with pytest.raises(IngestError, match=r"eval.jsonl line 2: invalid UTF-8"):
        decontam.build_index(_config(tmp_path, path))


def test_eval_texts_are_indexed_in_batches_within_the_byte_budget() -> None:
    # each batch: its first text, then each next one while the batch's bytes (a separator after
    # each text but the last) stay within SCREEN_CHARS; together they cover the texts in order
    budget = decontam.SCREEN_CHARS
    rng = np.random.default_rng(7)
    sizes = [0, 1, 5, budget - 1, budget, budget + 3, budget // 2, budget // 2 - 1]
    for _ in range(200):
        texts = [b"w" * int(rng.choice(sizes)) for _ in range(int(rng.integers(0, 40)))]
        bounds = decontam._batch_bounds(texts)
        assert [k for k, _ in bounds] == [0, *(j for _, j in bounds[:-1])][: len(bounds)]
        assert (bounds[-1][1] if bounds else 0) == len(texts)
        for k, j in bounds:
            used = sum(len(t) + 1 for t in texts[k:j]) - 1
            assert j == k + 1 or used <= budget
            if j < len(texts):  # the next text would not have fitted
                assert used + 1 + len(texts[j]) > budget
