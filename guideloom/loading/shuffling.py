"""One shuffle settings object, `Shuffle`, and the byte-sized two-level block shuffle (NumPy only).

Over object storage a shuffle trades randomness for requests. The block shuffle is sized in
bytes, so that one request is worth its round trip whatever the sample size:

1. the dataset is cut into *blocks* of ``block_bytes`` (default 1 MiB) of consecutive samples,
   and the blocks are permuted (a keyed Feistel permutation with cycle-walking: O(1) memory,
   evaluable at any position; `guideloom.loading.order.FeistelPermutation`);
2. consecutive permuted blocks form *windows* of ``window_bytes`` (default 512 MiB, or
   ``window_blocks`` blocks), and every sample of a window is permuted with every other.

A window's samples are all read before any is handed out: the loader fetches a window's share of
each rank as one group (`guideloom.loading.sampler`), and each of its blocks comes back in one
merged range request (two where it crosses a shard). So an epoch costs about one GET per block
per rank, and holds one window per worker in memory, while a batch draws from the whole window.

Underneath it is `guideloom.loading.order.EpochOrder`'s ``"block"`` order with runs of one
sample (``shuffle_run_size=1``): the order is a function of ``(seed, epoch, settings)`` only, the
same for any world size or number of workers, and the loader state records it in samples
(``shuffle_block_size``, ``shuffle_buffer_blocks``, ``shuffle_run_size``), as before. The old
block order (runs of 8 samples inside buffers of 4 blocks of 64 samples) is still built when its
keywords are given (``shuffle_block_size=64, shuffle_buffer_blocks=4, shuffle_run_size=8``), so
states saved before the byte-sized shuffle continue exactly.

A window at least as large as the dataset is one window of all the samples: a full shuffle
(`guideloom.loading.shuffle_report` says so), read in one group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from guideloom.errors import ShuffleSettingsError
from guideloom.loading.order import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_BUFFER_BLOCKS,
    ShuffleSettings,
    _shuffle_mode,
    positive_int,
)

__all__ = [
    "DEFAULT_SHUFFLE_BLOCK_BYTES",
    "DEFAULT_SHUFFLE_WINDOW_BYTES",
    "Shuffle",
    "resolve_shuffle",
]

# 512 blocks per window: a global batch of up to a few hundred samples then draws from about as
# many places as a random permutation's would (within 5% on the 64-region measure of
# `guideloom.shuffle_report`; 64 blocks of 8 MiB reach 0.77x at batch 64), while a 1 MiB
# range GET is still mostly transfer, not round trip, and an epoch of 1 TB costs ~10^6 GETs
# (about $0.40 at S3's list price).
DEFAULT_SHUFFLE_BLOCK_BYTES = 2**20
DEFAULT_SHUFFLE_WINDOW_BYTES = 512 * 2**20  # per rank: what a worker holds while it reads a window

_OLD = ("block_size", "buffer_blocks", "run_size")
_NEW = ("block_bytes", "window_bytes", "window_blocks")


@dataclass(frozen=True)
class Shuffle:
    """How every epoch is shuffled, in one object `StatefulDataLoader.from_storage` takes as
    ``shuffle=`` (and `guideloom.shuffle_report` too).

    ``Shuffle()`` is the byte-sized two-level block shuffle with its defaults;
    ``Shuffle("full")`` a full random permutation per epoch; ``Shuffle("none")`` the stored
    order. ``seed``, when given, is the order's seed (the loader's ``seed=`` otherwise).

    The block shuffle's sizes are either bytes (``block_bytes``, ``window_bytes`` or
    ``window_blocks``: the new two-level shuffle) or samples (``block_size``, ``buffer_blocks``,
    ``run_size``: the order of GuideLoom before the byte-sized shuffle, kept so that its states
    resume); not both.

    Args:
        mode: ``"block"`` (default), ``"full"`` or ``"none"``.
        block_bytes: Bytes of consecutive samples per block (default 1 MiB; at least one sample).
        window_bytes: Bytes of blocks whose samples are permuted together (default 512 MiB;
            at least one block). Ignored when ``window_blocks`` is given.
        window_blocks: Blocks per window, instead of ``window_bytes``.
        seed: The order's seed; None takes the loader's ``seed=``.
        block_size: The old block order: samples per block.
        buffer_blocks: The old block order: blocks per buffer.
        run_size: The old block order: samples kept together inside a buffer.
    """

    mode: str = "block"
    block_bytes: int | None = None
    window_bytes: int | None = None
    window_blocks: int | None = None
    seed: int | None = None
    block_size: int | None = None
    buffer_blocks: int | None = None
    run_size: int | None = None

    def __post_init__(self) -> None:
        _shuffle_mode(self.mode)  # a ValueError naming the allowed modes
        for name in (*_NEW, *_OLD):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, positive_int(name, value))
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer))
        ):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def settings(self, sample_bytes: int, where: str = "the dataset") -> ShuffleSettings:
        """The sample-level settings of this shuffle over samples of ``sample_bytes`` bytes.

        Args:
            sample_bytes: Bytes of one sample (a window: tokens x bytes per token).
            where: The dataset, for messages.

        Returns:
            The `ShuffleSettings` the order and the loader state use.

        Raises:
            ShuffleSettingsError: A block smaller than one sample, a window of fewer than one
                block, or old and new block settings mixed.
        """
        mode = _shuffle_mode(self.mode)
        if mode != "block":
            return ShuffleSettings(mode)
        old = {n: getattr(self, n) for n in _OLD if getattr(self, n) is not None}
        new = {n: getattr(self, n) for n in _NEW if getattr(self, n) is not None}
        if old and new:
            raise ShuffleSettingsError(
                f"shuffle settings {_names(old)} (the block order in samples, kept for old "
                f"states) and {_names(new)} (the byte-sized block shuffle) were both given: "
                "give only block_bytes/window_bytes for the byte-sized shuffle, or only "
                "block_size/buffer_blocks/run_size to continue a run of the old block order"
            )
        if old:
            return ShuffleSettings.from_options(
                "block",
                old.get("block_size", DEFAULT_BLOCK_SIZE),
                old.get("buffer_blocks", DEFAULT_BUFFER_BLOCKS),
                old.get("run_size"),
            )
        sample_bytes = max(1, int(sample_bytes))
        block_bytes = self.block_bytes or DEFAULT_SHUFFLE_BLOCK_BYTES
        block = block_bytes // sample_bytes
        if block < 1:
            raise ShuffleSettingsError(
                f"shuffle block_bytes={block_bytes} is smaller than one sample of {where} "
                f"({sample_bytes} bytes): a block holds whole samples. Use "
                f"block_bytes={max(sample_bytes, DEFAULT_SHUFFLE_BLOCK_BYTES)} (or at least "
                f"{sample_bytes})"
            )
        if self.window_blocks is not None:
            blocks = self.window_blocks
        else:
            window_bytes = self.window_bytes or DEFAULT_SHUFFLE_WINDOW_BYTES
            blocks = window_bytes // (block * sample_bytes)
            if blocks < 1:
                raise ShuffleSettingsError(
                    f"shuffle window_bytes={window_bytes} is smaller than one block of {where} "
                    f"({block} samples of {sample_bytes} bytes = {block * sample_bytes} bytes): a "
                    f"window holds whole blocks. Use window_bytes={64 * block * sample_bytes} "
                    f"(64 blocks) or at least {block * sample_bytes}, or a smaller block_bytes"
                )
        # A window larger than the dataset is one window of all of it (the order is the same for
        # any number of blocks per window >= the blocks there are, so the count is kept as
        # given: a dataset that grows keeps its settings).
        settings = ShuffleSettings("block", block, blocks, 1)
        return replace(settings, sized=(block * sample_bytes, block * blocks * sample_bytes))


def _names(given: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in given.items())


def resolve_shuffle(
    shuffle: Any,
    view: Any,
    *,
    shuffle_block_size: Any = None,
    shuffle_buffer_blocks: Any = None,
    shuffle_run_size: Any = None,
    shuffle_block_bytes: Any = None,
    shuffle_window_bytes: Any = None,
    shuffle_window_blocks: Any = None,
) -> tuple[ShuffleSettings, int | None]:
    """The loader's shuffle options over ``view``: ``(settings, seed or None)``.

    ``shuffle`` is a `Shuffle`, a `ShuffleSettings` (taken as it is), or the loader's keyword
    form: False / None / ``"none"``, True / ``"full"`` or ``"block"`` with the ``shuffle_*``
    keywords (the byte-sized ones, or the old ones in samples). The seed is the `Shuffle`'s,
    when it has one.

    Args:
        shuffle: The loader's ``shuffle=``.
        view: The dataset view (its ``sample_bytes`` and ``url``).
        shuffle_block_size: The old block order: samples per block.
        shuffle_buffer_blocks: The old block order: blocks per buffer.
        shuffle_run_size: The old block order: samples kept together.
        shuffle_block_bytes: Bytes per block of the byte-sized block shuffle.
        shuffle_window_bytes: Bytes per window of the byte-sized block shuffle.
        shuffle_window_blocks: Blocks per window, instead of ``shuffle_window_bytes``.

    Returns:
        The settings, and the `Shuffle`'s seed (None: the loader's).

    Raises:
        ShuffleSettingsError: Settings that do not fit the samples (see `Shuffle.settings`).
        ValueError: An unknown mode, a setting that is not a positive integer, or a `Shuffle`
            with keywords beside it.
    """
    keywords = {
        "block_size": shuffle_block_size,
        "buffer_blocks": shuffle_buffer_blocks,
        "run_size": shuffle_run_size,
        "block_bytes": shuffle_block_bytes,
        "window_bytes": shuffle_window_bytes,
        "window_blocks": shuffle_window_blocks,
    }
    given = {k: v for k, v in keywords.items() if v is not None}
    if isinstance(shuffle, ShuffleSettings):
        return shuffle, None
    if isinstance(shuffle, Shuffle):
        if given:
            raise ValueError(
                f"shuffle=Shuffle(...) and shuffle_{next(iter(given))}= were both given: put the "
                "size into the Shuffle object (Shuffle(mode='block', block_bytes=..., "
                "window_bytes=...)) and leave the shuffle_* keywords out"
            )
        spec = shuffle
    else:
        mode = _shuffle_mode(shuffle)
        if mode != "block":
            return ShuffleSettings(mode), None
        spec = Shuffle("block", **{k: positive_int(f"shuffle_{k}", v) for k, v in given.items()})
    return spec.settings(view.sample_bytes, str(view.url)), spec.seed
