"""A padding collator for documents.

GuideLoom returns documents as they were written: a batch of documents is a list of records of
different lengths. This collator pads the token ids of a batch to its longest document (capped at
``max_length``) and returns PyTorch tensors with an attention mask, ready for a model.

Run: python examples/padding_collator.py [DATASET_URL]   (default: a temporary directory)
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import torch

from guideloom import DocumentMsgpackFormat, DocumentStorage, StatefulDataLoader


class PadCollator:
    """Pad ``record["tokens"]`` lists to a common length.

    Returns ``input_ids`` and ``attention_mask`` of shape ``(batch, length)`` and ``labels``
    with ``-100`` on padding (the value PyTorch's cross-entropy ignores). A class rather than a
    closure, so it pickles into DataLoader worker processes.
    """

    def __init__(self, pad_id: int = 0, max_length: int | None = None, multiple_of: int = 1) -> None:
        self.pad_id = pad_id
        self.max_length = max_length
        self.multiple_of = multiple_of

    def __call__(self, records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        sequences = [list(r["tokens"])[: self.max_length] for r in records]
        length = max(len(s) for s in sequences)
        length = -(-length // self.multiple_of) * self.multiple_of  # round up, e.g. to 8
        input_ids = torch.full((len(sequences), length), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(sequences), length), dtype=torch.long)
        for row, seq in enumerate(sequences):
            input_ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
            attention_mask[row, : len(seq)] = 1
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def main(root: str) -> None:
    storage = DocumentStorage(f"{root}/chats", DocumentMsgpackFormat())
    with storage.writer() as writer:
        for n in [3, 7, 2, 5, 9, 4]:
            writer.append({"tokens": list(range(1, n + 1))})

    loader = StatefulDataLoader.from_storage(
        storage, batch_size=3, collate_fn=PadCollator(pad_id=0, max_length=8), num_workers=0
    )
    batches = list(loader)
    for batch in batches:
        print(batch["input_ids"].shape, batch["attention_mask"].sum(dim=1).tolist())

    first, second = batches
    assert first["input_ids"].shape == (3, 7)  # longest of 3, 7, 2
    assert first["attention_mask"].sum(dim=1).tolist() == [3, 7, 2]
    assert second["input_ids"].shape == (3, 8)  # 9 tokens capped at 8
    assert (first["labels"][2, 2:] == -100).all()

    # Without a collate_fn a document batch is simply a list of records.
    plain = next(iter(StatefulDataLoader.from_storage(storage, batch_size=2)))
    assert [len(r["tokens"]) for r in plain] == [3, 7]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
