"""A stream with tokens, document ids and a loss mask.

Each record is one prompt/response pair. The stream stores three fields per token: the token id,
the index of the document it came from, and a loss mask that is 1 only on response tokens. Windows
are cut from the joined stream, so one window can hold the end of one document and the start of
the next; the ``doc_id`` field tells the model where the boundary is.

Run: python examples/stream.py [DATASET_URL]   (default: a temporary directory)
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

EOS = 0
VOCAB: dict[str, int] = {"<eos>": EOS}


def tokenize(text: str) -> list[int]:
    """A toy tokenizer: one id per word. Use your real tokenizer here."""
    return [VOCAB.setdefault(word, len(VOCAB)) for word in text.split()]


def to_record(doc_id: int, prompt: str, response: str) -> dict[str, np.ndarray]:
    prompt_ids, response_ids = tokenize(prompt), tokenize(response) + [EOS]
    tokens = np.array(prompt_ids + response_ids)
    return {
        "tokens": tokens,
        "doc_id": np.full(len(tokens), doc_id),
        # Train on the response (and its <eos>), not on the prompt.
        "loss_mask": np.array([0] * len(prompt_ids) + [1] * len(response_ids)),
    }


FORMAT = StreamNumpyFormat({"tokens": np.uint32, "doc_id": np.uint32, "loss_mask": np.uint8})


def main(root: str) -> None:
    pairs = [
        ("what is two plus two", "four"),
        ("name a colour", "blue is a colour"),
        ("say hello", "hello"),
    ]
    storage = StreamStorage(f"{root}/sft", FORMAT)
    with storage.writer() as writer:
        for doc_id, (prompt, response) in enumerate(pairs):
            writer.append(to_record(doc_id, prompt, response))

    total = storage.manifest.total_tokens
    ds = StreamDataset(storage, sequence_length=6)
    print(f"{total} tokens -> {len(ds)} windows of 6; {total % 6} trailing tokens dropped")
    assert len(ds) == total // 6

    words = {i: w for w, i in VOCAB.items()}
    for i in range(len(ds)):
        window = ds[i]
        crosses = len(set(window["doc_id"].tolist())) > 1
        print(
            f"window {i}: {' '.join(words[t] for t in window['tokens'])!r:44} "
            f"doc_id={window['doc_id'].tolist()} loss_mask={window['loss_mask'].tolist()}"
            + ("  <- crosses a document boundary" if crosses else "")
        )

    # Window 1 holds the <eos> of document 0 and the start of document 1.
    assert ds[1]["doc_id"].tolist() == [0, 1, 1, 1, 1, 1]
    assert ds[0]["loss_mask"].tolist() == [0, 0, 0, 0, 0, 1]

    # The fast batch path: one array per field, shape (batch, sequence_length).
    batch = ds.read_windows([0, 2])
    assert batch["tokens"].shape == (2, 6) and batch["loss_mask"].dtype == np.uint8

    # An attention mask that keeps each token inside its own document (block-diagonal causal).
    doc = batch["doc_id"][1]  # window 2: documents 1 and 2
    mask = (doc[:, None] == doc[None, :]) & np.tri(6, dtype=bool)
    print("attention mask for window 2:\n", mask.astype(int))
    assert mask[3].tolist() == [False, False, False, True, False, False]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
