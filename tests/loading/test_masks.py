"""Attention masks from ``cu_seqlens``: a tiny causal attention layer gives on a packed batch
(with the mask) exactly what it gives running each document alone."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage
from guideloom.loading.masks import document_ids, flex_attention_available, flex_block_mask, sdpa_mask


class TinyAttention(torch.nn.Module):
    """One causal self-attention layer with rotary-free learned position embeddings (indexed
    by ``position_ids``, so a document's positions restart at its start)."""

    def __init__(self, vocab: int = 64, dim: int = 16, heads: int = 2, max_len: int = 64) -> None:
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(max_len, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)

    def split(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed(tokens) + self.pos(position_ids)
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        return tuple(t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))

    def forward(
        self, tokens: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        q, k, v = self.split(tokens, position_ids)
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _batch(tmp_path, lengths, length, batch_size):
    storage = StreamStorage(tmp_path / "s", StreamNumpyFormat({"tokens": np.uint8}))
    rng = np.random.default_rng(0)
    with storage.writer() as w:
        for n in lengths:
            w.append({"tokens": rng.integers(0, 64, n)})
    loader = StatefulDataLoader.from_storage(
        storage, sequence_length=length, batch_size=batch_size, boundaries="records"
    )
    return next(iter(loader))


def _segments(batch):
    """Every (row, start, stop) document segment of the batch, from cu_seqlens."""
    b, n = batch["tokens"].shape
    cu = batch["cu_seqlens"].tolist()
    return [(a // n, a % n, a % n + (z - a)) for a, z in zip(cu[:-1], cu[1:])]


def test_packed_attention_equals_each_document_alone(tmp_path) -> None:
    torch.manual_seed(0)
    batch = _batch(tmp_path, [3, 7, 1, 12, 5, 9, 2, 6, 11], length=16, batch_size=3)
    b, n = batch["tokens"].shape
    layer = TinyAttention().eval()
    mask = sdpa_mask(batch["cu_seqlens"], b, n)
    assert mask.shape == (b, 1, n, n) and mask.dtype == torch.bool
    with torch.no_grad():
        packed = layer(batch["tokens"].long(), batch["position_ids"], mask)
        unmasked = layer(batch["tokens"].long(), batch["position_ids"], None)
        segments = _segments(batch)
        assert len(segments) > b  # documents inside windows, not just rows
        for row, start, stop in segments:
            alone = layer(
                batch["tokens"][row : row + 1, start:stop].long(),
                torch.arange(stop - start)[None],
                None,
            )
            torch.testing.assert_close(packed[row : row + 1, :, start:stop], alone, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(packed, unmasked)  # the mask matters here


@pytest.mark.skipif(not flex_attention_available(), reason="no torch.nn.attention.flex_attention")
def test_flex_block_mask_follows_the_same_rule(tmp_path) -> None:
    batch = _batch(tmp_path, [40, 100, 3, 90, 30], length=128, batch_size=2)
    b, n = batch["tokens"].shape
    block = flex_block_mask(batch["cu_seqlens"], b, n)
    dense = block.to_dense()  # (B, 1, q blocks, kv blocks): blocks that hold an allowed pair
    mask = sdpa_mask(batch["cu_seqlens"], b, n)
    size = block.BLOCK_SIZE[0]
    blocks = mask.reshape(b, 1, n // size, size, n // size, size).any(dim=(3, 5))
    assert torch.equal(dense.bool(), blocks)
    from torch.nn.attention.flex_attention import flex_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(b, 2, n, 8) for _ in range(3))
    with warnings.catch_warnings():  # eager flex_attention (no torch.compile) warns it is unfused
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = flex_attention(q, k, v, block_mask=block)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_document_ids_and_a_bad_cu_seqlens() -> None:
    ids = document_ids(torch.tensor([0, 2, 4, 5, 8], dtype=torch.int32), 2, 4)
    assert ids.tolist() == [[0, 0, 1, 1], [2, 3, 3, 3]]
    with pytest.raises(ValueError, match="cu_seqlens must run from 0 to batch_size \\* sequence_length = 8"):
        document_ids(torch.tensor([0, 3], dtype=torch.int32), 2, 4)
