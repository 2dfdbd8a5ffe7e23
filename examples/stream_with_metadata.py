"""A stream with metadata: the concepts each paragraph mentions, aligned to every window.

Each record is one article: its tokens, plus one span per paragraph whose annotation is the list of
concepts that paragraph mentions. A list of strings varies in size, so it cannot be a per-token
stream field; it is stored once per span (the *document data*), next to the tokens (the *stream
data*).

When a window is read, the spans that overlap it arrive clipped and in window coordinates, and
``align`` turns them into a fixed-shape sample: a multi-hot ``(sequence_length, num_concepts)``
matrix that says which concepts each token's paragraph mentions.

Run: python examples/stream_with_metadata.py [DATASET_URL]   (default: a temporary directory)
"""

from __future__ import annotations

import json
import sys
import tempfile
from typing import Any

import numpy as np

from guideloom import (
    StreamNumpyFormat,
    StreamWithMetaDataset,
    StreamWithMetaStorage,
    StreamWithMetaStorageFormat,
)


class ConceptFormat(StreamWithMetaStorageFormat):
    """Token stream + a list of concept names per span, aligned to a multi-hot matrix."""

    def __init__(self, concepts: list[str]) -> None:
        super().__init__(StreamNumpyFormat({"tokens": np.uint32}))
        self.concepts = list(concepts)
        self._index = {name: i for i, name in enumerate(self.concepts)}

    def config(self) -> dict[str, Any]:
        # The concept vocabulary changes what align returns, so the manifest records it.
        return {**super().config(), "concepts": self.concepts}

    def encode_meta(self, annotation: list[str]) -> bytes:
        unknown = [c for c in annotation if c not in self._index]
        if unknown:
            raise ValueError(f"unknown concepts {unknown}; known: {self.concepts}")
        return json.dumps(annotation).encode("utf-8")

    def decode_meta(self, data: bytes | memoryview) -> list[str]:
        return json.loads(bytes(data))

    def align(self, window: dict[str, np.ndarray], spans: list[tuple[int, int, Any]]) -> dict[str, Any]:
        length = len(window["tokens"])
        multi_hot = np.zeros((length, len(self.concepts)), dtype=np.uint8)
        for start, stop, concepts in spans:  # window coordinates, clipped to the window
            for name in concepts:
                multi_hot[start:stop, self._index[name]] = 1
        return {"tokens": window["tokens"], "concepts": multi_hot}


CONCEPTS = ["animals", "home", "play", "weather"]

ARTICLES = [
    # (paragraphs, concepts per paragraph)
    (["the cat sat on the mat", "it was raining outside"], [["animals", "home"], ["weather"]]),
    (["a dog chased the red ball", "then it slept"], [["animals", "play"], []]),
]


def to_record(paragraphs: list[str], concepts: list[list[str]], vocab: dict[str, int]):
    tokens: list[int] = []
    spans = []
    for text, names in zip(paragraphs, concepts):
        ids = [vocab.setdefault(w, len(vocab)) for w in text.split()]
        if names:  # a paragraph without concepts needs no span
            spans.append((len(tokens), len(tokens) + len(ids), names))
        tokens.extend(ids)
    return {"tokens": np.array(tokens)}, spans


def main(root: str) -> None:
    vocab: dict[str, int] = {}
    storage = StreamWithMetaStorage(f"{root}/articles", ConceptFormat(CONCEPTS))
    with storage.writer() as writer:
        for paragraphs, concepts in ARTICLES:
            record, spans = to_record(paragraphs, concepts, vocab)
            writer.append(record, spans=spans)

    ds = StreamWithMetaDataset(
        StreamWithMetaStorage(f"{root}/articles", ConceptFormat(CONCEPTS)), sequence_length=5
    )
    words = {i: w for w, i in vocab.items()}
    print(f"{storage.manifest.total_tokens} tokens -> {len(ds)} windows of 5")
    for i in range(len(ds)):
        sample = ds[i]
        print(f"window {i}:")
        for token, row in zip(sample["tokens"], sample["concepts"]):
            names = [c for c, on in zip(CONCEPTS, row) if on]
            print(f"  {words[int(token)]:8} {names}")

    # Window 1 is "mat it was raining outside": the end of paragraph 1, then paragraph 2.
    window = ds[1]
    assert [words[int(t)] for t in window["tokens"]] == ["mat", "it", "was", "raining", "outside"]
    assert window["concepts"][0].tolist() == [1, 1, 0, 0]  # mat: animals, home
    assert window["concepts"][1].tolist() == [0, 0, 0, 1]  # it: weather
    assert window["concepts"].shape == (5, len(CONCEPTS))
    # 19 tokens make three windows; "ball then it slept" is the dropped partial window.
    assert len(ds) == 3
    assert ds[2]["concepts"].tolist() == [[1, 0, 1, 0]] * 5  # a dog chased the red: animals, play


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
