"""Item 8 of #37: a mixture of a ``tokens`` + ``loss_mask`` source and a ``tokens``-only source
works with a per-source default (``{"defaults": {"loss_mask": 1}}``); without one it is refused
with a message that names the default to add (main refused every such mixture)."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import Mixture, StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.errors import MixtureError

SFT = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})
TEXT = StreamNumpyFormat({"tokens": np.uint16})
L = 8


def _sft(root) -> StreamStorage:
    storage = StreamStorage(root, SFT)
    with storage.writer() as w:
        for k in range(6):
            tokens = np.arange(1000 + 16 * k, 1000 + 16 * (k + 1), dtype=np.uint16)
            w.append({"tokens": tokens, "loss_mask": (tokens % 3 != 0).astype(np.uint8)})
    return StreamStorage(root, SFT)


def _text(root) -> StreamStorage:
    storage = StreamStorage(root, TEXT)
    with storage.writer() as w:
        w.append({"tokens": np.arange(0, 10 * L, dtype=np.uint16)})
    return StreamStorage(root, TEXT)


@pytest.mark.parametrize("order", ["sft first", "text first"])
def test_the_default_fills_the_field_the_source_lacks(tmp_path, order) -> None:
    sft, text = _sft(tmp_path / "sft"), _text(tmp_path / "text")
    sources = {"sft": (sft, 1.0), "text": (text, 1.0, {"defaults": {"loss_mask": 1}})}
    if order == "text first":
        sources = dict(reversed(list(sources.items())))
    mix = Mixture(sources)
    loader = StatefulDataLoader.from_storage(
        mix, sequence_length=L, batch_size=4, shuffle=True, seed=1, sources=True, labels=True
    )
    seen = {"sft": 0, "text": 0}
    for batch in loader:
        assert batch["loss_mask"].dtype.is_floating_point is False and batch["loss_mask"].shape[1] == L
        for row, src in enumerate(batch["source"].tolist()):
            tokens, mask = batch["tokens"][row].long(), batch["loss_mask"][row].long()
            if mix.names[src] == "text":
                seen["text"] += 1
                assert (tokens < 1000).all() and (mask == 1).all()
            else:
                seen["sft"] += 1
                assert (tokens >= 1000).all() and mask.tolist() == (tokens % 3 != 0).long().tolist()
                # labels honour the stored mask of the SFT rows even when text is the first source
                lab = batch["labels"][row].tolist()
                assert all(lab[i] == -100 for i in range(L - 1) if mask[i + 1] == 0)
    assert seen["sft"] and seen["text"]


def test_without_a_default_the_message_names_the_fix_and_it_works(tmp_path) -> None:
    sft, text = _sft(tmp_path / "sft"), _text(tmp_path / "text")
    with pytest.raises(MixtureError) as caught:
        Mixture({"sft": (sft, 1.0), "text": (text, 1.0)})
    message = str(caught.value)
    assert "'text': (storage, weight, {'defaults': {'loss_mask': 1}})" in message
    fixed = Mixture({"sft": (sft, 1.0), "text": (text, 1.0, {"defaults": {"loss_mask": 1}})})  # as written
    assert next(iter(StatefulDataLoader.from_storage(fixed, sequence_length=L)))["loss_mask"].shape == (1, L)


def test_bad_defaults_are_named(tmp_path) -> None:
    sft, text = _sft(tmp_path / "sft"), _text(tmp_path / "text")
    with pytest.raises(MixtureError, match="has the field 'loss_mask'"):
        Mixture(
            {
                "sft": (sft, 1.0, {"defaults": {"loss_mask": 1}}),
                "text": (text, 1.0, {"defaults": {"loss_mask": 1}}),
            }
        )
    with pytest.raises(MixtureError, match="does not fit"):
        Mixture({"sft": (sft, 1.0), "text": (text, 1.0, {"defaults": {"loss_mask": 300}})})
    with pytest.raises(MixtureError, match="no source of the mixture has"):
        Mixture({"sft": (sft, 1.0), "text": (text, 1.0, {"defaults": {"loss_mask": 1, "doc": 0}})})
    with pytest.raises(MixtureError, match="maps a stream field"):
        Mixture({"sft": (sft, 1.0), "text": (text, 1.0, {"defaults": ["loss_mask"]})})
