"""Each epoch's sample order, computable at any position (NumPy only).

An *order* maps a position in an epoch (0 .. N-1: the how-many-th sample the epoch hands out,
counted over all ranks) to a sample index of the dataset (a window or a document). It is a
bijection on ``[0, N)`` derived from ``(seed, epoch)`` alone, and evaluating it at position ``p``
costs the same for every ``p``: nothing is materialized, memory does not grow with ``N`` (which
may be 10^10), and resuming at 90 % of an epoch costs what resuming at 1 % does.

Three modes:

``"none"``
    Sequential: position ``p`` is sample ``p``. Best locality, no randomness.
``"full"``
    A keyed pseudo-random permutation of all ``N`` samples: a balanced Feistel network over the
    smallest even power of two >= N, restricted to ``[0, N)`` by cycle-walking (re-applying it
    until the value falls inside; on average fewer than 4 times). Every epoch gets an independent
    permutation. Any sample can follow any other: the best mixing, the worst locality.
``"block"``
    Locality for remote data. Three levels, all keyed by ``(seed, epoch)``:

    1. *runs*: ``run_size`` consecutive samples that always stay together, in their order;
    2. *blocks*: ``block_size`` consecutive samples (a whole number of runs); the blocks are
       permuted (Feistel again);
    3. *buffers*: consecutive stretches of ``buffer_blocks`` permuted blocks; inside each buffer
       the *runs* are permuted (a Feistel keyed by the buffer number).

    So a stretch of ``block_size * buffer_blocks`` positions draws from only ``buffer_blocks``
    contiguous regions of the dataset, and every aligned group of ``run_size`` positions is
    ``run_size`` consecutive samples. A rank's batch of ``B`` consecutive positions (``B`` a
    multiple of ``run_size``) is therefore ``B / run_size`` contiguous stretches, which a remote
    view fetches as that many merged range requests instead of ``B``; over the epoch every sample
    still appears exactly once and blocks come in a random order.

    The trade-off is mixing against requests. ``run_size=1`` permutes single samples inside a
    buffer (the best mixing block mode offers; on a remote dataset about one request per
    sample, because a batch's samples are never adjacent); ``run_size=8`` keeps runs of 8
    together (one request per 8 samples, but the 8 samples of a run always train in the same
    step, in their stored order). Larger blocks and buffers mix more across the dataset; larger
    runs cut requests further. ``buffer_blocks * block_size >= N`` with ``run_size=1`` is a full
    shuffle. The order never depends on the batch size, ``num_workers`` or the world size: the
    runs line up with batches only when the batch size is a multiple of ``run_size``, and a
    batch that is not just costs a request or two more.

    Partial pieces: when ``N`` is not a multiple of ``run_size``, the ``N mod run_size`` samples
    left over (fewer than one run) take the last positions of the epoch, so that every earlier
    run stays aligned with batches. So that these are not always the same samples (``drop_last``
    would always drop them), with ``run_size > 1`` the sample indexes are rotated by an offset
    drawn from ``(seed, epoch)``: run and block boundaries move every epoch, and the one run that
    wraps past the end of the dataset is read as two stretches. When the number of whole runs is
    not a multiple of the runs per block, the last block is partial; it takes a random place in
    the block order, and since it holds whole runs, every run stays aligned. With ``run_size=1``
    nothing is rotated (this is the block order of loader states of version 1).

All arithmetic is on 64-bit unsigned NumPy arrays and vectorized over a batch of positions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_BUFFER_BLOCKS",
    "DEFAULT_RUN_SIZE",
    "EpochOrder",
    "FeistelPermutation",
    "ShuffleMode",
    "ShuffleSettings",
    "derive_key",
    "permute_many",
    "positive_int",
]

ShuffleMode = Literal["none", "full", "block"]
_MODES = ("none", "full", "block")
DEFAULT_BLOCK_SIZE = 64  # samples per block (the loader's shuffle_block_size)
DEFAULT_BUFFER_BLOCKS = 4  # blocks per shuffle buffer (shuffle_buffer_blocks)
DEFAULT_RUN_SIZE = 8  # the largest default run (shuffle_run_size is gcd(8, block size))

_MASK64 = (1 << 64) - 1
_ROUNDS = 6
# Up to this many positions, `FeistelPermutation` walks them one by one with Python integers:
# 2-4 us a position against 20-25 us per NumPy pass over all of them (66 array operations), and
# cycle-walking repeats that pass. Measured here, the two cost the same at about 24 positions.
# A resume's first group is one batch (8 samples in the bench): 44-100 us -> 20-27 us.
_SCALAR_POSITIONS = 20

# Purposes, so that keys for different uses of one (seed, epoch) never coincide.
_PURPOSE_FULL = 1
_PURPOSE_BLOCKS = 2
_PURPOSE_BUFFER = 3
_PURPOSE_ROTATE = 4


def derive_key(*parts: int) -> int:
    """A 64-bit key from a sequence of integers (seed, epoch, purpose, ...); stable across runs.

    Each part's low 64 bits, then the bits above them (seeds wider than 64 bits still count), are
    mixed into the key by one splitmix64 step each (written out inline: a resume takes some 30
    of them, and a function call per step cost as much as the arithmetic)."""
    h = 0x6A09E667F3BCC908
    for part in parts:
        value = int(part)
        for word in (value & _MASK64, (value >> 64) & _MASK64):
            z = ((h ^ word) + 0x9E3779B97F4A7C15) & _MASK64
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
            h = z ^ (z >> 31)
    return h


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer on a fresh uint64 array, in place (a bijection; wraps silently)."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


class FeistelPermutation:
    """A keyed bijection on ``[0, n)``, evaluable (and invertible) at any point.

    A balanced Feistel network on ``2 * half`` bits, where ``4 ** half`` is the smallest power of
    four >= ``n``, with cycle-walking to stay inside ``[0, n)``.
    """

    def __init__(self, n: int, key: int) -> None:
        if n < 1:
            raise ValueError(f"a permutation needs a domain of at least 1 element, got {n}")
        if n > 1 << 62:
            raise ValueError(f"a permutation domain of {n} elements is larger than 2**62")
        self.n = int(n)
        bits = max(2, (self.n - 1).bit_length())
        self._half = (bits + 1) // 2
        self._mask = np.uint64((1 << self._half) - 1)
        keys = [derive_key(key, r) for r in range(_ROUNDS)]
        self._int_keys = keys  # for `_walk_small`: the same keys as Python integers
        self._keys = [np.uint64(k) for k in keys]

    def _rounds(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        half = np.uint64(self._half)
        left, right = x >> half, x & self._mask
        if not inverse:
            for k in self._keys:
                left, right = right, left ^ (_mix(right ^ k) & self._mask)
        else:
            for k in reversed(self._keys):
                left, right = right ^ (_mix(left ^ k) & self._mask), left
        return (left << half) | right

    def _walk_small(self, positions: list[int], inverse: bool) -> list[int]:
        """`_walk` one position at a time with Python integers (the same arithmetic: `_mix` and
        the splitmix64 constants of `derive_key`), for a few positions already checked."""
        n, half, mask = self.n, self._half, (1 << self._half) - 1
        keys = self._int_keys[::-1] if inverse else self._int_keys
        out = []
        for v in positions:
            while True:  # cycle-walking, as in `_walk`
                left, right = v >> half, v & mask
                for k in keys:
                    z = (left if inverse else right) ^ k
                    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
                    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
                    z = (z ^ (z >> 31)) & mask
                    left, right = (right ^ z, left) if inverse else (right, left ^ z)
                v = (left << half) | right
                if v < n:
                    break
            out.append(v)
        return out

    def _walk(self, positions: np.ndarray, inverse: bool) -> np.ndarray:
        x = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        if x.size <= _SCALAR_POSITIONS:
            values = x.ravel().tolist()
            if values and (min(values) < 0 or max(values) >= self.n):
                raise IndexError(f"positions must lie in [0, {self.n})")
            return np.array(self._walk_small(values, inverse), dtype=np.int64).reshape(x.shape)
        if x.min() < 0 or x.max() >= self.n:
            raise IndexError(f"positions must lie in [0, {self.n})")
        y = self._rounds(x.astype(np.uint64), inverse)
        outside = np.flatnonzero(y >= np.uint64(self.n))
        while outside.size:  # cycle-walking: terminates, every cycle through [0, n) returns there
            y[outside] = self._rounds(y[outside], inverse)
            outside = outside[y[outside] >= np.uint64(self.n)]
        return y.astype(np.int64)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """The images of ``positions`` (int64 array of the same shape, flattened to 1-D)."""
        return self._walk(positions, inverse=False)

    def inverse(self, values: np.ndarray) -> np.ndarray:
        """The positions whose images are ``values``."""
        return self._walk(values, inverse=True)


@dataclass(frozen=True)
class ShuffleSettings:
    """How every epoch is shuffled: the mode and, for ``"block"``, its three sizes.

    Built and checked once (by the loader from its options, or by `EpochOrder`'s keyword form),
    then handed on whole: to the epoch orders, a mixture's order and the loader state, which
    records it. ``block_size`` (samples), ``buffer_blocks`` and ``run_size`` (samples; it divides
    ``block_size``) are positive integers for ``"block"`` and None for ``"none"`` and ``"full"``,
    which have no blocks.
    """

    mode: ShuffleMode = "none"
    block_size: int | None = None
    buffer_blocks: int | None = None
    run_size: int | None = None
    # ``(block bytes, window bytes)`` when the sizes came from bytes (`guideloom.loading.shuffling`):
    # the loader then reads a window's share as one group. Not part of the identity: the order
    # is decided by the sizes in samples.
    sized: tuple[int, int] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"shuffle mode must be 'none', 'full' or 'block', got {self.mode!r}")
        sizes = (self.block_size, self.buffer_blocks, self.run_size)
        if self.mode != "block":
            if any(x is not None for x in sizes):
                raise ValueError(f"shuffle mode {self.mode!r} has no blocks: leave the block sizes None")
            return
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in sizes):
            raise ValueError("block_size, buffer_blocks and run_size must be positive")
        block, _, run = self.blocks
        if block % run:
            raise ValueError(
                f"block_size={self.block_size} must be a multiple of run_size={self.run_size}: blocks are "
                "made of whole runs"
            )

    @property
    def blocks(self) -> tuple[int, int, int]:
        """``(block_size, buffer_blocks, run_size)`` of a ``"block"`` order; 1s for the others."""
        return (self.block_size or 1, self.buffer_blocks or 1, self.run_size or 1)

    @classmethod
    def of(
        cls, mode: ShuffleMode, block_size: int = 1, buffer_blocks: int = 1, run_size: int = 1
    ) -> ShuffleSettings:
        """``mode`` with these block sizes (positive), which only ``"block"`` keeps."""
        if mode not in _MODES:
            raise ValueError(f"shuffle mode must be 'none', 'full' or 'block', got {mode!r}")
        if block_size < 1 or buffer_blocks < 1 or run_size < 1:
            raise ValueError("block_size, buffer_blocks and run_size must be positive")
        if mode != "block":
            return cls(mode)
        return cls("block", _as_int(block_size), _as_int(buffer_blocks), _as_int(run_size))

    @classmethod
    def from_options(
        cls,
        shuffle: bool | str | None,
        block_size: Any = DEFAULT_BLOCK_SIZE,
        buffer_blocks: Any = DEFAULT_BUFFER_BLOCKS,
        run_size: Any = None,
    ) -> ShuffleSettings:
        """The loader's options, checked with messages that name them: ``shuffle`` is False /
        None / ``"none"``, True / ``"full"`` or ``"block"``; ``shuffle_block_size``,
        ``shuffle_buffer_blocks`` and ``shuffle_run_size`` (default ``gcd(8, block size)``)
        only matter for ``"block"``."""
        mode = _shuffle_mode(shuffle)
        if mode != "block":
            return cls(mode)
        block = positive_int("shuffle_block_size", block_size)
        buffer = positive_int("shuffle_buffer_blocks", buffer_blocks)
        if run_size is None:
            run = math.gcd(DEFAULT_RUN_SIZE, block)
        else:
            run = positive_int("shuffle_run_size", run_size)
            if block % run:
                raise ValueError(
                    f"shuffle_block_size={block} must be a multiple of shuffle_run_size={run}: "
                    "blocks are made of whole runs"
                )
        return cls("block", block, buffer, run)


def _as_int(value: Any) -> int:
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value


def _shuffle_mode(shuffle: bool | str | None) -> ShuffleMode:
    if shuffle is None or shuffle is False or shuffle == "none":
        return "none"
    if shuffle is True or shuffle == "full":
        return "full"
    if shuffle == "block":
        return "block"
    raise ValueError(f"shuffle must be False, True, 'full' or 'block', got {shuffle!r}")


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int if it is a positive integer (not a bool), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class EpochOrder:
    """The sample order of one epoch: ``order(positions) -> sample indexes``.

    ``num_samples`` samples (windows or documents); ``shuffle`` is a `ShuffleSettings`, or
    (the keyword form) a mode ``"none"``, ``"full"`` or ``"block"`` with ``block_size``
    (samples), ``buffer_blocks`` and ``run_size`` (samples; it must divide ``block_size``),
    which only matter for ``"block"``.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: ShuffleMode | ShuffleSettings,
        seed: int,
        epoch: int,
        block_size: int = 1,
        buffer_blocks: int = 1,
        run_size: int = 1,
    ) -> None:
        if num_samples < 1:
            raise ValueError(f"an epoch order needs at least 1 sample, got {num_samples}")
        settings = (
            shuffle
            if isinstance(shuffle, ShuffleSettings)
            else ShuffleSettings.of(shuffle, block_size, buffer_blocks, run_size)
        )
        self.settings = settings
        self.num_samples = n = int(num_samples)
        self.shuffle = settings.mode
        self.seed = int(seed)
        self.epoch = int(epoch)
        if settings.mode == "full":
            self._perm = FeistelPermutation(n, derive_key(seed, epoch, _PURPOSE_FULL))
        elif settings.mode == "block":
            # Block arithmetic is in units of runs; the last N mod run_size samples (no whole
            # run) keep the epoch's last positions, and run_size > 1 rotates the sample indexes.
            block, buffer, run = settings.blocks
            self._run = run
            self._units = units = n // run  # whole runs
            self._tail = units * run  # first position of the leftover samples
            self._rotate = derive_key(seed, epoch, _PURPOSE_ROTATE) % n if run > 1 else 0
            if units:
                self._k = k = block // run  # runs per block
                self._g = buffer
                self._nb = nb = -(-units // k)
                self._r = units - (nb - 1) * k  # runs in the last (possibly partial) block, 1 .. k
                self._blocks = FeistelPermutation(nb, derive_key(seed, epoch, _PURPOSE_BLOCKS))
                # slot = place in the permuted block order; the partial block sits in slot _jp
                self._jp = int(self._blocks.inverse(np.array([nb - 1]))[0])

    def __call__(self, positions: np.ndarray | list[int] | range) -> np.ndarray:
        """Sample indexes (int64) at ``positions`` of this epoch, each in ``[0, num_samples)``."""
        p = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        if p.size and (p.min() < 0 or p.max() >= self.num_samples):
            raise IndexError(f"positions must lie in [0, {self.num_samples})")
        if self.shuffle == "none":
            return p.copy()
        if self.shuffle == "full":
            return self._perm(p)
        return self._run_order(p)

    def window_of(self, positions: np.ndarray) -> np.ndarray:
        """The window (``"block"``: the buffer) of each position: the stretch of positions
        whose samples come from the same ``buffer_blocks`` blocks; 0 for the other modes (one
        window: the epoch). The leftover samples of a partial run count as one more window.

        Args:
            positions: Positions of the epoch.

        Returns:
            The window number of each position (int64), non-decreasing with the position.
        """
        p = np.atleast_1d(np.asarray(positions, dtype=np.int64))
        if self.shuffle != "block" or not self._units:
            return np.zeros_like(p)
        units = p // self._run
        window = self._slot_of(np.minimum(units, self._units - 1)) // self._g
        return np.where(p < self._tail, window, (self._nb - 1) // self._g + 1)

    # -- block mode ------------------------------------------------------------------------
    def _run_order(self, p: np.ndarray) -> np.ndarray:
        run = self._run
        if run == 1:
            return self._block_order(p)
        out = p.copy()  # leftover samples (positions >= _tail) stay in place before rotation
        whole = p < self._tail
        if whole.any():
            q = p[whole]
            units, where = np.unique(q // run, return_inverse=True)  # each run's order once
            out[whole] = self._block_order(units)[where] * run + q % run
        out += self._rotate
        out[out >= self.num_samples] -= self.num_samples
        return out

    def _slot_start(self, j: np.ndarray) -> np.ndarray:
        """First unit (run) of slot ``j`` (``j == nb`` gives the number of whole runs)."""
        return j * self._k - (self._k - self._r) * (j > self._jp)

    def _slot_of(self, p: np.ndarray) -> np.ndarray:
        a = self._jp * self._k  # first unit of the partial block's slot
        after = self._jp + 1 + (p - a - self._r) // self._k
        return np.where(p < a, p // self._k, np.where(p < a + self._r, self._jp, after))

    def _block_order(self, p: np.ndarray) -> np.ndarray:
        """Unit positions (runs) -> unit indexes: blocks permuted, units permuted per buffer."""
        buffers = self._slot_of(p) // self._g
        shuffled = np.empty_like(p)
        for b in np.unique(buffers):  # a batch of consecutive positions spans one or two buffers
            sel = buffers == b
            lo = int(self._slot_start(np.int64(b * self._g)))
            hi = int(self._slot_start(np.int64(min((b + 1) * self._g, self._nb))))
            perm = FeistelPermutation(hi - lo, derive_key(self.seed, self.epoch, _PURPOSE_BUFFER, b))
            shuffled[sel] = lo + perm(p[sel] - lo)
        slots = self._slot_of(shuffled)
        return self._blocks(slots) * self._k + (shuffled - self._slot_start(slots))


def permute_many(orders: Sequence[EpochOrder], which: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``orders[which[k]]([x[k]])`` for every ``k``, for full-shuffle orders, in one pass.

    The same arithmetic as `FeistelPermutation` (so the same orders), with each element's
    half width, mask, round keys and domain as arrays: a mixture's sources share the NumPy
    calls of every round and of every cycle-walking step instead of paying them per source.
    """
    perms = [o._perm for o in orders]
    half = np.array([p._half for p in perms], dtype=np.uint64)[which]
    mask = np.array([p._mask for p in perms], dtype=np.uint64)[which]
    keys = np.array([p._keys for p in perms], dtype=np.uint64).T[:, which]  # (rounds, elements)
    domain = np.array([p.n for p in perms], dtype=np.uint64)[which]

    def rounds(y: np.ndarray, h: np.ndarray, m: np.ndarray, k: np.ndarray) -> np.ndarray:
        left, right = y >> h, y & m
        for key in k:
            left, right = right, left ^ (_mix(right ^ key) & m)
        return (left << h) | right

    y = rounds(x.astype(np.uint64), half, mask, keys)
    outside = np.flatnonzero(y >= domain)
    while outside.size:  # cycle-walking, as in FeistelPermutation
        y[outside] = rounds(y[outside], half[outside], mask[outside], keys[:, outside])
        outside = outside[y[outside] >= domain[outside]]
    return y.astype(np.int64)
