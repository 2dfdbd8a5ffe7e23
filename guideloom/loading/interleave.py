"""Which source each position of a mixture draws from: a stride schedule in closed form (NumPy only).

A mixture of ``S`` sources with weights ``w_i`` (proportions of samples, summing to 1) hands out
positions ``p = 0, 1, 2, ...``. `Interleave` says, for any ``p``, which source position
``p`` draws from and how many draws that source had before it, at a cost of ``O(S)`` integer
operations and without any per-sample table: there is nothing to replay on resume. (The
``"quota"`` schedule below keeps one period of the weights, at most 65,536 positions,
independent of the datasets' sizes.)

The construction: a binary tree over the sources (chosen from the weights alone, see below); at
an internal node whose left subtree has weight ``a`` of the node's weight, the node's ``t``-th
position goes left iff ``round(a * (t + 1)) > round(a * t)`` (``round(x) = floor(x + 1/2)``), and
its index in the chosen child is ``round(a * t)`` (left) or ``t - round(a * t)`` (right). That is a
*Sturmian* (Beatty) split: after ``t`` positions the left child has exactly ``round(a * t)``, so
the counts of both children are within 1/2 of their share at every ``t``. Descending the tree
gives the source and its draw index; a whole range of consecutive positions is evaluated with a
few vectorized integer operations per tree level.

Two schedules (``schedule=``), chosen per weighting by ``"auto"``:

``"tree"``: after any prefix of ``p`` positions, source ``i`` has had ``n_i(p)`` draws with
``|n_i(p) - w_i * p| <= 1/2 * (1 + sum over the leaf's non-root ancestors A of w_i / W_A)``
(the errors of the splits on the path, each scaled by the share of the leaf below that node).
Each term ``w_i / W_A`` is below 1, so a leaf at depth ``d`` is within ``d / 2``. For up to 4
sources the tree has depth at most 2 and the bound is below 1. For more sources the tree is the
one (of a least-depth tree, a Huffman tree and a weight-balanced split) with the smallest bound,
always below ``ceil(log2 S) / 2`` and below 1 for many weightings, but not for all: no tree of
such splits is within one for every weighting.

``"quota"``: the schedule is periodic: after ``T = sum(weights)`` positions (integer weights)
every source has had exactly its weight, so one period decides every position. `_QuotaPeriod`
builds that period once, by earliest-deadline-first over each source's draws, each draw allowed
in the slots where it keeps the source within ``1 - 1/(2S - 2)`` of its share (Tijdeman's
bound for the chairman assignment problem, the best possible for every weighting; for 2
sources 1/2). Earliest-deadline-first meets every such window whenever some schedule does, and
Tijdeman proved one does, so every prefix of every source is within one sample. It keeps the
period (a byte a position, two beyond 256 sources) and each source's counts every 64
positions: position ``p`` is looked up at ``p mod T``, ``counts(p)`` adds at most 63 table
entries to a checkpoint. It is built for ``T <= 65,536`` (weights with a common denominator
of at most that: short decimals, small integers), in about 0.2 s at the largest.

``"auto"`` takes the tree where its proven bound is below 1 (every mixture of up to 4 sources:
the schedules of earlier versions are unchanged there), else the quota period where ``T``
allows, else the tree. `Interleave.max_deviation` is the bound of the schedule in use: the
tree's proven bound, or the quota period's exact worst prefix (measured over the whole period,
so over every prefix).

Why not random sampling by weight: drawing each position's source at random gives prefix
counts that wander by about ``sqrt(w * (1 - w) * p)`` (about 300 samples after a million
draws at ``w = 0.1``), so a short run or the first steps after a resume see the wrong mixture;
and finding the source of position ``p`` needs the random draws of every earlier position to
know how far each source has got. Here both are exact and O(S).

Weights are held as integers (exactly for integers and short decimals such as ``0.7`` or
``1e-6``, otherwise the proportions rounded to ``2**-40``), so all arithmetic is exact integer arithmetic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["SCHEDULES", "Interleave", "check_schedule", "decimal_fraction", "integer_weights"]

SCHEDULES = ("auto", "tree", "quota")

_WEIGHT_BITS = 40  # float weights become integers out of 2**40
_MAX_RANGE = 1 << 14  # positions evaluated in one vectorized pass (keeps products within int64)
QUOTA_MAX_PERIOD = 1 << 16  # the largest period (sum of integer weights) the quota schedule tabulates
_CHECKPOINT = 64  # positions between the quota period's stored counts


def decimal_fraction(w: float | Fraction) -> Fraction:
    """A weight as the fraction it is written as: ``0.7 -> 7/10`` (not the binary float's value)."""
    if isinstance(w, Fraction):
        return w
    if isinstance(w, (int, np.integer)):
        return Fraction(int(w))
    return Fraction(repr(float(w)))


def integer_weights(weights: Sequence[float | Fraction]) -> tuple[int, ...]:
    """Positive weights as coprime integers with the same proportions (to ``2**-40`` for floats).

    Raises ``ValueError`` for a weight that is not a positive finite number, or one so small
    against the others that it rounds to nothing.
    """
    for i, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating, Fraction)):
            raise ValueError(f"weight {i} is {w!r}: weights must be positive numbers")
        if not math.isfinite(float(w)) or w <= 0:
            raise ValueError(f"weight {i} is {w!r}: weights must be positive, finite numbers")
    # Decimal fractions as written (0.7 -> 7/10), when their common denominator stays small.
    decimal = [decimal_fraction(w) for w in weights]
    scale = math.lcm(*(f.denominator for f in decimal))
    ints = [int(f * scale) for f in decimal]
    if sum(ints) >= 1 << 44:
        fracs = [Fraction(w) for w in weights]
        total = sum(fracs)
        ints = [round(f / total * (1 << _WEIGHT_BITS)) for f in fracs]
        for i, (n, w) in enumerate(zip(ints, weights)):
            if n < 1:
                raise ValueError(
                    f"weight {i} ({w!r}) is smaller than 2**-{_WEIGHT_BITS} of the total: it would "
                    "never be drawn; raise it or leave that source out"
                )
    g = math.gcd(*ints)
    return tuple(n // g for n in ints)


@dataclass(frozen=True)
class _Node:
    weight: int
    leaf: int = -1  # the source index, for a leaf
    left: _Node | None = None
    right: _Node | None = None


def _huffman(weights: Sequence[int]) -> _Node:
    heap = [(w, i, _Node(w, leaf=i)) for i, w in enumerate(weights)]
    heapq.heapify(heap)
    tie = len(weights)
    while len(heap) > 1:
        wa, _, a = heapq.heappop(heap)
        wb, _, b = heapq.heappop(heap)
        heapq.heappush(heap, (wa + wb, tie, _Node(wa + wb, left=b, right=a)))
        tie += 1
    return heap[0][2]


def _balanced(items: list[tuple[int, int]]) -> _Node:
    """Split the sources (heaviest first, each to the lighter side) into two halves, recursively."""
    if len(items) == 1:
        return _Node(items[0][0], leaf=items[0][1])
    left: list[tuple[int, int]] = []
    right: list[tuple[int, int]] = []
    weight_left = weight_right = 0
    for w, i in sorted(items, key=lambda x: (-x[0], x[1])):
        if weight_left <= weight_right:
            left.append((w, i))
            weight_left += w
        else:
            right.append((w, i))
            weight_right += w
    a, b = _balanced(left), _balanced(right)
    return _Node(a.weight + b.weight, left=a, right=b)


def _even(items: list[tuple[int, int]]) -> _Node:
    """A tree of the least depth (``ceil(log2 S)``): sources split by count, heaviest alternating."""
    if len(items) == 1:
        return _Node(items[0][0], leaf=items[0][1])
    ranked = sorted(items, key=lambda x: (-x[0], x[1]))
    a, b = _even(ranked[0::2]), _even(ranked[1::2])
    return _Node(a.weight + b.weight, left=a, right=b)


def _bounds(root: _Node) -> dict[int, float]:
    """Per source, the proven bound on ``|n_i(p) - w_i p|`` for this tree."""
    out: dict[int, float] = {}

    def walk(node: _Node, ancestors: list[int]) -> None:
        if node.leaf >= 0:
            out[node.leaf] = 0.5 * sum(node.weight / a for a in [*ancestors[1:], node.weight])
            return
        for child in (node.left, node.right):
            assert child is not None
            walk(child, [*ancestors, node.weight])

    walk(root, [])
    return out


class _QuotaPeriod:
    """One period of the quota schedule (see the module docstring), tabulated.

    ``weights`` are positive integers with ``T = sum(weights) <= QUOTA_MAX_PERIOD``. Draw ``k``
    of source ``i`` (from 0) may take slot ``t`` (position, from 0) when it keeps the source's
    count within ``delta = 1 - 1/(2S - 2)`` of ``w_i * p`` on both sides of it: released at
    ``ceil((k + 1 - delta) T / W_i) - 1``, due by ``floor((k + delta) T / W_i)``. Each slot
    goes to the released draw due first (ties to the lower source number), which is
    deterministic and meets every deadline (asserted while building).
    """

    def __init__(self, weights: Sequence[int]) -> None:
        w = [int(x) for x in weights]
        n, total = len(w), sum(w)
        m = max(2 * n - 2, 2)  # delta = (m - 1) / m; 1/2 for one or two sources
        period = np.empty(total, dtype=np.uint8 if n <= 256 else np.uint16)
        drawn = [0] * n
        waiting = [(0, i) for i in range(n)]  # (release slot, source) of each source's next draw
        ready: list[tuple[int, int]] = []  # (deadline slot, source)
        push, pop = heapq.heappush, heapq.heappop
        for t in range(total):
            while waiting and waiting[0][0] <= t:
                i = pop(waiting)[1]
                push(ready, ((drawn[i] * m + m - 1) * total // (m * w[i]), i))
            deadline, i = pop(ready)
            if deadline < t:  # cannot happen (Tijdeman's theorem); checked, not assumed
                raise AssertionError(f"quota schedule missed a deadline for weights {w}")
            period[t] = i
            k = drawn[i] = drawn[i] + 1
            if k < w[i]:
                release = -(-((k + 1) * m - (m - 1)) * total // (m * w[i])) - 1
                push(waiting, (max(release, t + 1), i))
        self.weights, self.total, self.period = tuple(w), total, period
        # counts of every source before positions 0, 64, 128, ... (and after the whole period)
        marks = np.arange(0, total + 1, _CHECKPOINT)
        self._marks = np.empty((len(marks), n), dtype=np.int64)
        exact = np.empty(n)
        ideal = np.arange(total + 1, dtype=np.int64)
        for i in range(n):  # one pass per source keeps the memory at a few arrays of T
            running = np.concatenate([[0], np.cumsum(period == i, dtype=np.int64)])
            self._marks[:, i] = running[marks]
            exact[i] = np.abs(running * total - w[i] * ideal).max() / total
        self.bounds = {i: float(exact[i]) for i in range(n)}

    def counts(self, p: int) -> list[int]:
        laps, r = divmod(int(p), self.total)
        j = r // _CHECKPOINT
        extra = np.bincount(self.period[j * _CHECKPOINT : r], minlength=len(self.weights))
        return [laps * w + int(c) + int(e) for w, c, e in zip(self.weights, self._marks[j], extra)]

    def sources(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        n = stop - start
        at = (np.arange(n, dtype=np.int64) + start % self.total) % self.total
        src = self.period[at].astype(np.int64)
        # draw index: the source's count before ``start`` plus its rank among the range's positions
        order = np.argsort(src, kind="stable")
        first = np.searchsorted(src[order], np.arange(len(self.weights)))
        draw = np.empty(n, dtype=np.int64)
        draw[order] = np.arange(n, dtype=np.int64) - first[src[order]]
        return src, draw + np.asarray(self.counts(start), dtype=np.int64)[src]


def check_schedule(weights: Sequence[int], schedule: str) -> None:
    """Raise ``ValueError`` unless ``schedule`` is known and can deal these integer weights."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be 'auto' (the default), 'tree' or 'quota', got {schedule!r}")
    total = sum(int(w) for w in weights)
    if schedule == "quota" and total > QUOTA_MAX_PERIOD:
        raise ValueError(
            f"the quota schedule tabulates one period of sum(weights) = {total:,} positions, "
            f"more than {QUOTA_MAX_PERIOD:,}: round the weights to fewer digits, or use "
            "schedule='tree' (or 'auto')"
        )


class Interleave:
    """The schedule of a mixture: ``sources(p0, p1)`` and ``counts(p)``, at any positions.

    ``weights`` are positive integers (see `integer_weights`); the schedule depends on
    them alone (not on a seed: it is the same deterministic pattern every epoch).
    ``schedule`` is ``"auto"``, ``"tree"`` or ``"quota"`` (see the module docstring);
    `schedule` (the attribute) is the one in use.

    Args:
        weights: Each source's weight, a positive integer.
        schedule: ``"auto"``, ``"tree"`` or ``"quota"``.

    Raises:
        ValueError: Weights that are not positive integers, an unknown schedule, or
            ``"quota"`` for weights summing to more than `QUOTA_MAX_PERIOD`.
    """

    def __init__(self, weights: Sequence[int], schedule: str = "auto") -> None:
        if not weights or any(int(w) < 1 for w in weights):
            raise ValueError(f"an interleave needs positive integer weights, got {list(weights)!r}")
        check_schedule(weights, schedule)
        self.weights = tuple(int(w) for w in weights)
        self.num_sources = len(self.weights)
        if self.num_sources == 1:
            self._root = _Node(self.weights[0], leaf=0)
            self.bounds = {0: 0.0}
        else:
            items = [(w, i) for i, w in enumerate(self.weights)]
            trees = [_even(items), _huffman(self.weights), _balanced(items)]
            scored = [(max(_bounds(t).values()), k) for k, t in enumerate(trees)]
            self._root = trees[min(scored)[1]]
            self.bounds = _bounds(self._root)
        if schedule == "auto":
            tree_ok = max(self.bounds.values()) < 1
            schedule = "tree" if tree_ok or sum(self.weights) > QUOTA_MAX_PERIOD else "quota"
        self.schedule = schedule
        """The schedule in use: ``"tree"`` or ``"quota"``."""
        self._quota = _QuotaPeriod(self.weights) if schedule == "quota" else None
        if self._quota is not None:
            self.bounds = self._quota.bounds
        self.max_deviation = max(self.bounds.values())
        """The largest ``|n_i(p) - w_i p|`` over sources and prefixes: the tree's proven bound,
        or the quota period's exact worst prefix (at most ``1 - 1/(2S - 2)``)."""

    @property
    def shares(self) -> tuple[float, ...]:
        total = sum(self.weights)
        return tuple(w / total for w in self.weights)

    def counts(self, p: int) -> list[int]:
        """Draws of each source among positions ``[0, p)`` (exact, O(S) Python integers).

        Args:
            p: A position (>= 0).

        Returns:
            One count per source.
        """
        if self._quota is not None:
            return self._quota.counts(p)
        out = [0] * self.num_sources

        def walk(node: _Node, t: int) -> None:
            if node.leaf >= 0:
                out[node.leaf] = t
                return
            assert node.left is not None and node.right is not None
            n_left = (2 * node.left.weight * t + node.weight) // (2 * node.weight)
            walk(node.left, n_left)
            walk(node.right, t - n_left)

        walk(self._root, int(p))
        return out

    def sources(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """For positions ``[start, stop)``: the source of each (int64) and its draw index there.

        The draw index ``k`` of position ``p`` from source ``i`` is ``counts(p)[i]``: position
        ``p`` is source ``i``'s ``k``-th draw (from 0).

        Args:
            start: The first position.
            stop: The position after the last (``start <= stop``).

        Returns:
            ``(sources, draws)``, int64 arrays of ``stop - start`` entries.

        Raises:
            ValueError: The range is not valid.
        """
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop:
            raise ValueError(f"position range [{start}, {stop}) is not valid")
        src = np.empty(stop - start, dtype=np.int64)
        draw = np.empty(stop - start, dtype=np.int64)
        for lo in range(start, stop, _MAX_RANGE):
            hi = min(stop, lo + _MAX_RANGE)
            if self._quota is not None:
                s, d = self._quota.sources(lo, hi)
            else:
                s, d = self._range(self._root, lo, hi)
            src[lo - start : hi - start], draw[lo - start : hi - start] = s, d
        return src, draw

    def _range(self, node: _Node, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        if node.leaf >= 0:
            return np.full(t1 - t0, node.leaf, dtype=np.int64), np.arange(t0, t1, dtype=np.int64)
        assert node.left is not None and node.right is not None
        a2, n2 = 2 * node.left.weight, 2 * node.weight
        # n_left(t) = (a2 * t + W) // n2 for t in [t0, t1], split into a big exact part and a
        # small int64 part so that no product leaves int64.
        q, rem = divmod(a2 * t0 + node.weight, n2)
        j = np.arange(t1 - t0 + 1, dtype=np.int64)
        n_left = (rem + a2 * j) // n2  # relative to q
        go_left = np.diff(n_left) > 0
        l0, l1 = q + int(n_left[0]), q + int(n_left[-1])
        src = np.empty(t1 - t0, dtype=np.int64)
        draw = np.empty(t1 - t0, dtype=np.int64)
        if l1 > l0:
            src[go_left], draw[go_left] = self._range(node.left, l0, l1)
        r0, r1 = t0 - l0, t1 - l1
        if r1 > r0:
            go_right = ~go_left
            src[go_right], draw[go_right] = self._range(node.right, r0, r1)
        return src, draw

    def first_reaching(self, targets: Sequence[int], *, every: bool) -> int:
        """The smallest ``p`` at which every (``every=True``) or some source ``i`` has had
        ``targets[i]`` draws: the length of a mixture epoch under each stopping strategy.

        Args:
            targets: Draws wanted of each source.
            every: True: every source reaches its target; False: the first one does.

        Returns:
            The position.
        """
        targets = [int(t) for t in targets]

        def done(p: int) -> bool:
            counts = self.counts(p)
            hits = (c >= t for c, t in zip(counts, targets))
            return all(hits) if every else any(hits)

        if any(t < 1 for t in targets):
            raise ValueError(f"every source needs at least one draw, got targets {targets}")
        lo, hi = 0, 1  # invariant: done(lo) is false, done(hi) is true
        while not done(hi):
            lo, hi = hi, hi * 2
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if done(mid):
                hi = mid
            else:
                lo = mid
        return hi
