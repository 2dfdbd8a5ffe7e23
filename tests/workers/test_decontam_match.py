"""Decontamination's matching, without Ray: words as matching sees them, exact n-gram matches
(planted leaks found, near misses kept, a hash collision compared and not dropped), and the
named errors of a bad eval set."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from guideloom.errors import IngestError
from guideloom.workers import decontam
from guideloom.workers.config import IngestConfig

# Eval items of 20+ words; the corpus below plants leaks of them and near misses.
EVAL = [
    "Natalia sold clips to forty eight of her friends in April and then she sold half as many clips in May",
    "Which gas do plants absorb from the atmosphere during photosynthesis to build sugars in their green leaves",
    "A train leaves the station at noon travelling north at sixty miles per hour toward a distant mountain town",
]


def _index(n: int = 13) -> decontam.EvalIndex:
    items = [decontam.EvalItem("eval.jsonl", k + 1, None, "question") for k in range(len(EVAL))]
    texts = [b" ".join(decontam.normalized(t).split()) for t in EVAL]
    return decontam.EvalIndex(n, items, texts, ["eval.jsonl#question"])


def test_words_are_lowercase_without_punctuation_on_both_paths():
    assert decontam.normalized("Hello, World!\nDon't  stop_me.").split() == [
        b"hello",
        b"world",
        b"dont",
        b"stopme",
    ]
    # non-ASCII text takes the regular expression; ASCII characters are treated the same
    mixed = decontam.normalized("Café, “Hello” — World!\u00a0Don’t")
    assert mixed.split() == ["café".encode(), b"hello", b"world", b"dont"]
    for c in map(chr, range(128)):  # the two paths agree on every ASCII character
        ascii_words = decontam.normalized(f"a{c}b z").split()
        other_words = decontam.normalized(f"a{c}b z\u00e9").split()
        assert ascii_words[:-1] == other_words[:-1] and ascii_words[-1] + "é".encode() == other_words[-1], (
            repr(c)
        )


LEAKS = {
    # 13 words of item 1 inside other text
    "inside": "Story time. Natalia sold clips to forty eight of her friends in April and then she went home.",
    # item 2's words, split across a line break
    "line break": "Quiz: which gas do plants absorb from the\natmosphere during photosynthesis to build sugars?",
    # item 3, in another case and with other punctuation
    "case and punctuation": "A TRAIN -- leaves the station, at NOON; travelling north (at sixty) miles per hour!",
}
NEAR_MISSES = [
    "Natalia sold clips to forty eight of her friends in April and",  # 12 words of item 1
    "Natalia sold clips to forty nine of her friends in April and then she sold half",  # a word changed
    "Natalia sold clips to eight forty of her friends in April and then she sold half",  # two swapped
    "which gas do plants absorb from the air and the atmosphere during photosynthesis to build sugars",
    "A train leaves the station at noon travelling north at sixty kilometres per hour toward the sea",
    "Which gas do plants absorb from the atmosphere during photosynthe sis to build sugars",  # a split word
    "Natalia. Sold clips to forty eight of her friends",  # too short anyway
    "",
    "completely unrelated text about storage shards and windows " * 5,
]


def test_planted_leaks_are_found_and_near_misses_kept():
    index = _index()
    docs = [*LEAKS.values(), *NEAR_MISSES]
    found = index.check(docs)
    assert [m is not None for m in found] == [True] * len(LEAKS) + [False] * len(NEAR_MISSES)
    assert [m.item.line for m in found[: len(LEAKS)]] == [1, 2, 3]
    assert found[0].ngram == "natalia sold clips to forty eight of her friends in april and then"
    assert found[1].ngram.split()[:3] == ["which", "gas", "do"]
    assert found[2].message(13).startswith("shares the 13-gram 'a train leaves the station at noon")
    # one by one, the same answers as in one batch (no n-gram across two documents)
    assert [index.check([d])[0] for d in docs] == found
    # 12 words of an item, then the 13th in the next document: no n-gram across the two
    assert index.check([NEAR_MISSES[0], "then she sold half"]) == [None, None]
    assert index.check([NEAR_MISSES[0] + " then she sold half"])[0] is not None


def test_a_shorter_ngram_matches_more():
    assert _index(8).check([NEAR_MISSES[0]])[0] is not None
    assert _index(13).check([NEAR_MISSES[0]])[0] is None


def test_a_hash_collision_is_compared_not_dropped():
    index = _index()
    doc = "some twenty words that are not in the eval set at all but hash like one of its n grams"
    grams = decontam.ngram_hashes(decontam.normalized(doc), index.run)
    assert index.run < index.n  # (the index holds runs shorter than n, every stride-th one)
    # make the eval set's first run hash like this document's first run: a collision
    index.hashes = np.sort(np.concatenate([index.hashes, grams[:1]]))
    at = int(np.searchsorted(index.hashes, grams[0]))
    index.word = np.insert(index.word, at, 0)  # the first item's first n-gram
    assert index.check([doc]) == [None]
    assert index.check([LEAKS["inside"]])[0] is not None  # the real ones still match


def _config(tmp_path, **options) -> IngestConfig:
    return IngestConfig(inputs=[str(tmp_path / "x.jsonl")], output=str(tmp_path / "out"), **options)


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_eval_files_jsonl_parquet_and_a_folder(tmp_path):
    folder = tmp_path / "evals"
    folder.mkdir()
    _write_jsonl(folder / "a.jsonl", [{"question": EVAL[0]}, {"question": EVAL[1]}])
    pq.write_table(pa.table({"question": [EVAL[2]], "other": [1]}), folder / "b.parquet")
    index = decontam.build_index(
        _config(tmp_path, decontaminate=[str(folder)], decontaminate_field="question")
    )
    assert len(index.items) == 3 and index.usable == 3
    assert index.items[2].row == 1 and index.items[0].line == 1
    match = index.check([LEAKS["case and punctuation"]])[0]
    assert match.item.as_json() == {"file": str(folder / "b.parquet"), "row": 1, "field": "question"}
    # a mapping names its own field
    per_file = _config(tmp_path, decontaminate=[{"path": str(folder / "a.jsonl"), "field": "question"}])
    assert len(decontam.build_index(per_file).items) == 2


def test_bad_eval_sets_are_named_with_the_fix(tmp_path):
    path = _write_jsonl(tmp_path / "eval.jsonl", [{"question": EVAL[0]}, {"prompt": EVAL[1]}])
    with pytest.raises(
        IngestError,
        match=r"eval.jsonl line 1 has no field 'text' \(its fields: question\); .*--decontaminate-field",
    ):
        decontam.build_index(_config(tmp_path, decontaminate=[str(path)]))
    with pytest.raises(
        IngestError, match=r"eval.jsonl line 2 has no field 'question' \(its fields: prompt\)"
    ):
        decontam.build_index(_config(tmp_path, decontaminate=[str(path)], decontaminate_field="question"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(
        IngestError, match=r"the eval set \(.*empty.jsonl\) holds no item.*Point --decontaminate"
    ):
        decontam.build_index(_config(tmp_path, decontaminate=[str(empty)]))
    short = _write_jsonl(tmp_path / "short.jsonl", [{"text": "two words"}, {"text": "only three words"}])
    with pytest.raises(IngestError, match=r"has 13 words.*the longest has 3. Lower --decontaminate-ngram"):
        decontam.build_index(_config(tmp_path, decontaminate=[str(short)]))
    with pytest.raises(IngestError, match=r"--decontaminate: input .*missing.jsonl does not exist"):
        decontam.build_index(_config(tmp_path, decontaminate=[str(tmp_path / "missing.jsonl")]))
    text = tmp_path / "eval.txt"
    text.write_text(EVAL[0])
    with pytest.raises(
        IngestError, match=r"eval file .*eval.txt is text: --decontaminate reads JSON Lines or Parquet"
    ):
        decontam.build_index(_config(tmp_path, decontaminate=[str(text)]))
    numbers = _write_jsonl(tmp_path / "numbers.jsonl", [{"text": 12}])
    with pytest.raises(IngestError, match=r"numbers.jsonl line 1: field 'text' holds int, not text"):
        decontam.build_index(_config(tmp_path, decontaminate=[str(numbers)]))


def _first_shared_ngram(doc: list[bytes], items: list[list[bytes]], n: int) -> tuple[int, int] | None:
    """The definition, by brute force: (where the document's first n-gram that an item has
    starts, the first item that has it)."""
    held = {}
    for k, words in enumerate(items):
        for r in range(len(words) - n + 1):
            held.setdefault(tuple(words[r : r + n]), k)
    for p in range(len(doc) - n + 1):
        k = held.get(tuple(doc[p : p + n]))
        if k is not None:
            return p, k
    return None


@pytest.mark.parametrize("n", [1, 3, 5, 8, 11, 13, 17])
def test_the_sampled_index_finds_what_every_ngram_would(n):
    # A vocabulary of 6 words: documents and items share many runs shorter and longer than n,
    # items share n-grams with each other, and documents copy pieces of items at every offset.
    rng = np.random.default_rng(n)
    vocab = ["ant", "bee", "cat", "dog", "eel", "fox"]
    items = [[vocab[v] for v in rng.integers(0, 6, int(rng.integers(1, 40)))] for _ in range(30)]
    docs = []
    for _ in range(300):
        words = [vocab[v] for v in rng.integers(0, 4, int(rng.integers(0, 60)))]
        if rng.random() < 0.7:  # a piece of an item, n - 2 to n + 3 words of it, somewhere
            item = items[int(rng.integers(0, len(items)))]
            size = int(rng.integers(max(1, n - 2), n + 4))
            at, to = int(rng.integers(0, len(item) + 1)), int(rng.integers(0, len(words) + 1))
            words[to:to] = item[at : at + size]
        docs.append(" ".join(words))
    index = decontam.EvalIndex(
        n,
        [decontam.EvalItem("eval.jsonl", k + 1, None, "q") for k in range(len(items))],
        [" ".join(words).encode() for words in items],
        ["eval.jsonl#q"],
    )
    item_words = [[w.encode() for w in words] for words in items]
    for start in range(0, len(docs), 37):  # batches of several documents, as a part sends them
        batch = docs[start : start + 37]
        got = index.check(batch)
        for doc, match in zip(batch, got):
            words = doc.encode().split()
            want = _first_shared_ngram(words, item_words, n)
            if want is None:
                assert match is None, (n, doc)
                continue
            p, k = want
            assert match is not None, (n, doc)
            assert match.item.line == k + 1 and match.ngram == " ".join(doc.split()[p : p + n]), (n, doc)


def test_a_later_run_can_name_an_earlier_ngram_or_an_earlier_item():
    # n = 13 is indexed as runs of 11 words, every 3rd word of an item. A run found further
    # into a document can belong to an n-gram that starts before the n-gram found first.
    words = [f"w{k}" for k in range(23)]
    items = [
        words[10:23],  # item 1: the 13 words at 10; its run at its word 0 is found at 10
        ["zz", *words[9:22]],  # item 2: the 13 words at 9; its run at its word 3 is found at 11
        ["q", "q", *words[0:13]],  # item 3: the 13 words at 0, a word into its run at 3
        words[0:13],  # item 4: the same 13 words; found first (its run at 0 is found at 0)
    ]
    index = decontam.EvalIndex(
        13,
        [decontam.EvalItem("eval.jsonl", k + 1, None, "q") for k in range(len(items))],
        [" ".join(w).encode() for w in items],
        ["eval.jsonl#q"],
    )
    assert (index.stride, index.run) == (3, 11)
    later = " ".join(["a", "b", "c", "d", "e", "f", "g", "h", "i", *words[9:23]])
    first = " ".join(words[0:13])
    found = index.check([later, first])
    assert [(m.item.line, m.ngram.split()[0]) for m in found if m is not None] == [(2, "w9"), (3, "w0")]
