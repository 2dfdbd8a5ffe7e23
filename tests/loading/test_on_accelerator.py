"""``device=``, ``pin_memory=`` and document-boundary attention on a real GPU.

Skipped on machines without CUDA (this suite's CI); run on a GPU machine with
``python -m pytest tests/loading/test_on_accelerator.py --noconftest -q``. The module is
self-contained (it writes its own datasets), so it needs none of the suite's servers.

What it checks there:
- batches land on the GPU with every value equal to the CPU batches, with and without pinned
  memory, in the main process, in threads and in worker processes;
- ``pin_memory=True`` without ``device=`` hands out pinned host tensors;
- a state taken from a GPU loader resumes exactly (the same batches, on the GPU);
- the ``cu_seqlens`` a ``boundaries="records"`` (or ``pack="whole"``) batch carries drive torch's variable-length
  (FlashAttention) kernel to the same output as causal attention run document by document, and
  as ``masks.sdpa_mask`` and ``masks.flex_block_mask``: the attention a packed batch trains with
  never crosses a document boundary.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import pytest
import torch

from guideloom import StatefulDataLoader, StreamNumpyFormat, StreamStorage

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

SEQUENCE_LENGTH = 64


def _write_stream(url: str, tokens: int = 20_000) -> StreamStorage:
    fmt = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})
    storage = StreamStorage(url, fmt)
    rng = np.random.default_rng(0)
    with storage.writer(shard_size=8192) as writer:
        start = 0
        while start < tokens:
            n = min(int(rng.integers(5, 150)), tokens - start)
            toks = (np.arange(start, start + n) % 50_000).astype(np.uint16)
            writer.append({"tokens": toks, "loss_mask": (toks % 3 != 0).astype(np.uint8)})
            start += n
    return StreamStorage(url, fmt)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> StreamStorage:
    return _write_stream(str(tmp_path_factory.mktemp("gpu") / "stream"))


def _loader(storage: StreamStorage, **kwargs: Any) -> StatefulDataLoader:
    return StatefulDataLoader.from_storage(
        storage, sequence_length=SEQUENCE_LENGTH, batch_size=8, shuffle=True, seed=7, **kwargs
    )


def _cpu(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("pin", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize(
    "kind", [(0, "process"), (2, "thread"), (2, "process")], ids=["0", "thread", "process"]
)
def test_batches_on_the_gpu_equal_the_cpu_batches(
    stream: StreamStorage, kind: tuple[int, str], pin: bool
) -> None:
    workers, method = kind
    want = list(_loader(stream))
    loader = _loader(stream, num_workers=workers, parallel_method=method, device="cuda", pin_memory=pin)
    got = list(loader)
    assert len(got) == len(want) == len(loader) > 10
    for g, w in zip(got, want):
        assert {v.device.type for v in g.values() if isinstance(v, torch.Tensor)} == {"cuda"}
        assert _equal(_cpu(g), w)


def test_pin_memory_alone_hands_out_pinned_host_tensors(stream: StreamStorage) -> None:
    for workers in (0, 2):
        loader = _loader(stream, num_workers=workers, pin_memory=True)
        batches = [b for _, b in zip(range(5), loader)]
        assert batches
        for batch in batches:
            for value in batch.values():
                assert value.device.type == "cpu" and value.is_pinned()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_gpu_loader_resumes_exactly(stream: StreamStorage, workers: int) -> None:
    whole = [_cpu(b) for b in _loader(stream, device="cuda", pin_memory=True)]
    first = _loader(stream, num_workers=workers, device="cuda", pin_memory=True)
    it = iter(first)
    head = [_cpu(next(it)) for _ in range(7)]
    state = first.state_dict()
    del it, first
    resumed = _loader(stream, num_workers=2 - workers, device="cuda", pin_memory=True)
    resumed.load_state_dict(state)
    tail = [_cpu(b) for b in resumed]
    assert len(head) + len(tail) == len(whole)
    assert all(_equal(g, w) for g, w in zip(head + tail, whole))


def _causal_per_document(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: list[int]) -> Any:
    """(T, H, D) inputs: causal SDPA on each document alone, concatenated."""
    parts = []
    for a, b in zip(cu[:-1], cu[1:]):
        qs, ks, vs = (t[a:b].transpose(0, 1)[None] for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
        parts.append(out[0].transpose(0, 1))
    return torch.cat(parts)


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, mx: int) -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        pytest.skip(f"torch {torch.__version__} has no torch.nn.attention.varlen")
    params = inspect.signature(varlen_attn).parameters
    causal: dict[str, Any] = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
    return varlen_attn(q, k, v, cu, cu, mx, mx, **causal)


@pytest.mark.parametrize(
    "marks", [{"boundaries": "records"}, {"pack": "whole"}], ids=["boundaries", "packed"]
)
def test_varlen_attention_on_the_batch_boundaries_never_crosses_a_document(
    stream: StreamStorage, marks: dict[str, Any]
) -> None:
    from guideloom.loading import masks

    loader = _loader(stream, device="cuda", pin_memory=True, **marks)
    batch = next(iter(loader))
    cu = batch["cu_seqlens"]
    assert cu.device.type == "cuda" and cu.dtype == torch.int32
    rows, length = batch["tokens"].shape
    assert int(cu[-1]) == rows * length and len(cu) > rows + 1  # documents cut the rows
    heads, dim = 4, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(rows * length, heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(3)
    )
    cu_list = cu.tolist()
    want = _causal_per_document(q, k, v, cu_list).float()
    got = _varlen(q, k, v, cu, int(batch["max_seqlen"])).float()
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=2e-2, rtol=2e-2), (got - want).abs().max()

    def batched(t: torch.Tensor) -> torch.Tensor:  # (B*L, H, D) -> (B, H, L, D)
        return t.reshape(rows, length, heads, dim).transpose(1, 2)

    mask = masks.sdpa_mask(cu, rows, length)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        batched(q), batched(k), batched(v), attn_mask=mask
    )
    sdpa = sdpa.transpose(1, 2).reshape(rows * length, heads, dim).float()
    assert torch.allclose(sdpa, want, atol=2e-2, rtol=2e-2), (sdpa - want).abs().max()

    if masks.flex_attention_available():
        from torch.nn.attention.flex_attention import flex_attention

        block_mask = masks.flex_block_mask(cu, rows, length)
        with warnings.catch_warnings():  # torch.compile's own deprecation notices, not ours
            warnings.simplefilter("ignore", DeprecationWarning)
            compiled = torch.compile(flex_attention)
            flex = compiled(batched(q), batched(k), batched(v), block_mask=block_mask)
        flex = flex.transpose(1, 2).reshape(rows * length, heads, dim).float()
        assert torch.allclose(flex, want, atol=2e-2, rtol=2e-2), (flex - want).abs().max()

    # a cu_seqlens that ignores the documents (one per row) gives different attention: the check
    # above can tell a boundary-respecting kernel from one that attends across documents
    rows_only = torch.arange(0, rows * length + 1, length, device="cuda", dtype=torch.int32)
    crossing = _varlen(q, k, v, rows_only, length).float()
    assert not torch.allclose(crossing, want, atol=2e-2, rtol=2e-2)
