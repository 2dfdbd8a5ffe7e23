"""Attention masks from a batch's ``cu_seqlens`` (``boundaries=`` in the loader): causal within
each document, nothing across documents or rows.

- `document_ids`: the segment number of every token, ``(B, L)``;
- `sdpa_mask`: a boolean ``(B, 1, L, L)`` mask for
  ``torch.nn.functional.scaled_dot_product_attention`` (True: attend);
- `flex_block_mask`: a FlexAttention ``BlockMask`` where ``torch.nn.attention.flex_attention``
  exists (torch 2.5 on), for ``flex_attention(q, k, v, block_mask=...)``.

FlashAttention's variable-length kernels take ``cu_seqlens`` and ``max_seqlen`` as they are.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["document_ids", "flex_attention_available", "flex_block_mask", "sdpa_mask"]


def document_ids(cu_seqlens: torch.Tensor, batch_size: int, sequence_length: int) -> torch.Tensor:
    """The segment of every token (``(B, L)`` int64, counting over the flattened batch) for a
    batch of ``batch_size`` rows of ``sequence_length`` tokens whose ``cu_seqlens`` is given."""
    total = batch_size * sequence_length
    cu = cu_seqlens.to(torch.int64)
    if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != total:
        raise ValueError(
            f"cu_seqlens must run from 0 to batch_size * sequence_length = {total}, got "
            f"{cu.tolist()[:4]}...{cu.tolist()[-1:]}; pass the batch's own cu_seqlens and shape"
        )
    positions = torch.arange(total, device=cu.device)
    ids = torch.searchsorted(cu[1:], positions, right=True)
    return ids.reshape(batch_size, sequence_length)


def sdpa_mask(cu_seqlens: torch.Tensor, batch_size: int, sequence_length: int) -> torch.Tensor:
    """A boolean ``(B, 1, L, L)`` mask: query ``i`` attends to key ``j`` when ``j <= i`` and
    both are in the same document (pass as ``attn_mask`` to ``scaled_dot_product_attention``)."""
    ids = document_ids(cu_seqlens, batch_size, sequence_length)
    same = ids[:, :, None] == ids[:, None, :]
    causal = torch.ones(sequence_length, sequence_length, dtype=torch.bool, device=ids.device).tril()
    return (same & causal)[:, None]


def flex_attention_available() -> bool:
    """Whether this torch has ``torch.nn.attention.flex_attention``."""
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_block_mask(
    cu_seqlens: torch.Tensor,
    batch_size: int,
    sequence_length: int,
    *,
    device: str | torch.device | None = None,
) -> Any:
    """A FlexAttention ``BlockMask`` of the same rule as `sdpa_mask` (causal within each
    document), for ``flex_attention(q, k, v, block_mask=...)``.

    Raises:
        RuntimeError: This torch has no ``torch.nn.attention.flex_attention`` (torch < 2.5);
            use `sdpa_mask` instead.
    """
    if not flex_attention_available():
        raise RuntimeError(
            f"torch {torch.__version__} has no torch.nn.attention.flex_attention (torch 2.5 on); "
            "use guideloom.loading.masks.sdpa_mask with scaled_dot_product_attention instead"
        )
    from torch.nn.attention.flex_attention import create_block_mask

    ids = document_ids(cu_seqlens, batch_size, sequence_length)
    if device is not None:
        ids = ids.to(device)

    def rule(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (ids[b, q] == ids[b, k]) & (k <= q)

    return create_block_mask(rule, batch_size, None, sequence_length, sequence_length, device=str(ids.device))
