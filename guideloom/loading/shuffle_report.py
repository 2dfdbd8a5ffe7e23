"""How good a shuffle is, and what it costs, from one epoch's order alone (NumPy only, no data read).

`shuffle_report` evaluates an epoch's order (`guideloom.loading.order.EpochOrder`: every
position's sample index) and compares it with a true random permutation of the same size:

- **jump entropy**: the entropy (bits) of the jumps ``index[p + 1] - index[p]`` between
  consecutive samples, in ``2 * regions`` equal bins over ``(-N, N)`` (the metric MosaicML's
  shuffle simulator uses, binned so that the figure does not grow with ``N``). A sequential
  order has 0 bits; a random permutation about ``log2(regions) + 0.28``.
- **distinct regions, blocks and shards per batch**: how many of the ``regions`` equal parts of
  the dataset, of its blocks of ``block_bytes`` (the shuffle's own; 1 MiB for the other modes)
  and of its shards one global batch (``batch_size x world_size`` consecutive positions) draws
  from, against the exact expectation for a random permutation (sampling without replacement).
  A batch from few places trains on correlated data. The regions are the measure to compare
  orders by (a block shuffle's batch draws from at most a window's blocks, whatever its mixing).
- **Spearman's rho** between position and index (a random permutation: about 0; sequential: 1),
  and the **largest displacement** ``max |index - position|`` as a share of ``N``.
- **predicted reads**: the ranged GETs, bytes, the largest read group (the memory one worker
  holds while it reads it) and the list price of one epoch, played from the loader's own groups
  (a window's share per rank for the byte-sized block shuffle, groups of ``read_ahead_bytes``
  otherwise) by counting the runs of consecutive samples each group asks for, split where a
  shard ends. Gaps the reader would bridge are not bridged here, and a lone window that straddles
  two shards counts once: close to `guideloom.estimate`, which plays the reader itself (slowly).

For 10^7 samples it takes a few seconds: everything is one vectorised pass over the order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guideloom.io.backends import BACKENDS
from guideloom.io.ranges import DEFAULT_MAX_GAP
from guideloom.loading.order import EpochOrder, ShuffleSettings
from guideloom.loading.shuffling import DEFAULT_SHUFFLE_BLOCK_BYTES, resolve_shuffle

__all__ = ["ShuffleReport", "shuffle_report"]

_READ_AHEAD_BYTES = 4 * 2**20  # the loader's default read group (guideloom.loading.sampler)
_CHUNK = 1 << 22  # positions evaluated per call of the order


@dataclass
class ShuffleReport:
    """One epoch's order measured against a random permutation of the same size.

    Attributes:
        url: The dataset.
        mode: ``"none"``, ``"full"`` or ``"block"``.
        settings: The order's settings in samples and bytes.
        num_samples: Samples in the epoch.
        sample_bytes: Bytes of one sample.
        batch_size: Samples per batch per rank.
        world_size: Ranks.
        full_shuffle: The order is a full shuffle (``"full"``, or a block window as large as
            the dataset).
        entropy: Bits of the jump histogram; ``entropy_random``: the same of a random permutation.
        regions_per_batch: Mean distinct regions (``regions`` equal parts of the dataset) per
            global batch; ``regions_random``: expected of a random permutation.
        blocks_per_batch: Mean distinct blocks per global batch; ``blocks_random``: expected.
        shards_per_batch: Mean distinct shards per global batch (None: shards not known);
            ``shards_random``: expected.
        spearman: Spearman's rho of position and index; ``spearman_random``: a random one's.
        displacement: Largest ``|index - position|`` as a share of ``num_samples``.
        gets: Predicted ranged GETs per epoch (all ranks).
        bytes: Predicted bytes per epoch (all ranks).
        group_bytes: The largest read group, bytes one worker holds at once.
        price: US dollars per epoch at S3's list prices (GETs; plus egress, see ``egress``).
        egress: US dollars per epoch of transfer out of the region (0 inside it).
        seconds: Time the report took.
    """

    url: str
    mode: str
    settings: dict[str, Any]
    num_samples: int
    sample_bytes: int
    batch_size: int
    world_size: int
    full_shuffle: bool
    entropy: float
    entropy_random: float
    regions_per_batch: float
    regions_random: float
    blocks_per_batch: float
    blocks_random: float
    shards_per_batch: float | None
    shards_random: float | None
    spearman: float
    spearman_random: float
    displacement: float
    gets: int
    bytes: int
    group_bytes: int
    price: float
    egress: float
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def entropy_ratio(self) -> float:
        """Jump entropy over a random permutation's (1.0: as random)."""
        return self.entropy / self.entropy_random if self.entropy_random else 1.0

    @property
    def regions_ratio(self) -> float:
        """Distinct regions per batch over a random permutation's expectation."""
        return self.regions_per_batch / self.regions_random if self.regions_random else 1.0

    @property
    def blocks_ratio(self) -> float:
        """Distinct blocks per batch over a random permutation's expectation."""
        return self.blocks_per_batch / self.blocks_random if self.blocks_random else 1.0

    @property
    def amplification(self) -> float:
        """Bytes read per epoch (all ranks) over the bytes of the samples handed out: 1.0 reads
        each byte once; with several ranks a block shuffle reads each window once per rank."""
        handed = (self.num_samples // (self.batch_size * self.world_size)) * self.batch_size * self.world_size
        return self.bytes / (handed * self.sample_bytes) if handed else 0.0

    @property
    def shards_ratio(self) -> float | None:
        """Distinct shards per batch over a random permutation's expectation."""
        if self.shards_per_batch is None or not self.shards_random:
            return None
        return self.shards_per_batch / self.shards_random

    def as_dict(self) -> dict[str, Any]:
        """The figures as a plain dict (with the ratios)."""
        out = {k: v for k, v in self.__dict__.items() if k != "notes"}
        out.update(
            entropy_ratio=self.entropy_ratio, regions_ratio=self.regions_ratio,
            blocks_ratio=self.blocks_ratio, shards_ratio=self.shards_ratio,
            amplification=self.amplification, notes=list(self.notes),
        )  # fmt: skip
        return out

    def __str__(self) -> str:
        s = self.settings
        what = self.mode
        if self.mode == "block":
            what += (
                f" (blocks of {s['block_samples']:,} samples = {_size(s['block_bytes'])}, windows of "
                f"{s['window_blocks']:,} blocks = {_size(s['window_bytes'])}"
                + (f", runs of {s['run_size']}" if s["run_size"] != 1 else "")
                + ")"
            )
        shards = (
            f"{self.shards_per_batch:.2f} vs {self.shards_random:.2f} random ({self.shards_ratio:.3f}x)"
            if self.shards_per_batch is not None and self.shards_random is not None
            else "not known (a subset or a mixture)"
        )
        lines = [
            f"shuffle report: {self.url}",
            f"  order            {what}" + ("  [a full shuffle]" if self.full_shuffle else ""),
            f"  epoch            {self.num_samples:,} samples of {_size(self.sample_bytes)}, batches "
            f"of {self.batch_size} x {self.world_size} rank(s)",
            f"  jump entropy     {self.entropy:.3f} bits vs {self.entropy_random:.3f} random "
            f"({self.entropy_ratio:.3f}x)",
            f"  regions / batch  {self.regions_per_batch:.2f} vs {self.regions_random:.2f} random "
            f"({self.regions_ratio:.3f}x; the epoch cut into {self.settings['regions']})",
            f"  blocks / batch   {self.blocks_per_batch:.2f} vs {self.blocks_random:.2f} random "
            f"({self.blocks_ratio:.3f}x)",
            f"  shards / batch   {shards}",
            f"  Spearman rho     {self.spearman:+.4f} (random {self.spearman_random:+.4f})",
            f"  max displacement {self.displacement:.3f} of the epoch",
            f"  per epoch        {self.gets:,} GETs, {_size(self.bytes)} "
            f"({_size(self.bytes / max(1, self.gets))} per GET; {self.amplification:.2f}x the "
            f"samples' bytes), read groups up to {_size(self.group_bytes)} per worker",
            f"  list price       ${self.price:.4f} per epoch in GETs (S3), ${self.egress:.2f} more "
            "if read from outside the region",
            f"  computed in      {self.seconds:.2f} s from the order alone (no data read)",
        ]
        return "\n".join(lines + [f"  note: {n}" for n in self.notes])


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def shuffle_report(
    view_or_url: Any,
    shuffle: Any = "block",
    batch_size: int = 8,
    world_size: int = 1,
    *,
    sequence_length: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    regions: int = 64,
    storage_options: dict[str, Any] | None = None,
    **settings: Any,
) -> ShuffleReport:
    """Measure one epoch's order of a dataset against a true random permutation of its size.

    Nothing but the manifest is read. See `guideloom.loading.shuffle_report` for the figures.

    Args:
        view_or_url: A dataset view (``storage.dataset(...)``), a storage, or a dataset's URL
            or path (opened with `guideloom.open`).
        shuffle: As the loader takes it: ``False`` / ``"none"``, ``True`` / ``"full"``,
            ``"block"`` or a `guideloom.Shuffle`.
        batch_size: Samples per batch per rank.
        world_size: Ranks; a global batch is ``batch_size * world_size`` consecutive positions.
        sequence_length: Tokens per window, for a stream storage or URL.
        seed: The order's seed (a `guideloom.Shuffle`'s own seed wins).
        epoch: Which epoch's order.
        regions: Bins of the jump histogram per direction.
        storage_options: fsspec options for a URL.
        **settings: The loader's shuffle keywords: ``shuffle_block_bytes``,
            ``shuffle_window_bytes``, ``shuffle_window_blocks`` (or the old
            ``shuffle_block_size``, ``shuffle_buffer_blocks``, ``shuffle_run_size``), and
            ``read_ahead_bytes`` (the read group of the other modes, default 4 MiB).

    Returns:
        A `ShuffleReport`; ``print(report)`` shows it.

    Raises:
        ShuffleSettingsError: Block or window settings that do not fit the samples.
        ValueError: A stream without ``sequence_length``, a bad setting, or a mixture (report
            its sources one by one).
    """
    started = time.perf_counter()
    view = _view(view_or_url, sequence_length, storage_options)
    if view.mixture is not None:
        raise ValueError("shuffle_report measures one dataset's order: report a mixture's sources one by one")
    read_ahead_bytes = settings.pop("read_ahead_bytes", None)
    unknown = sorted(set(settings) - _KEYWORDS)
    if unknown:
        raise ValueError(f"shuffle_report got unknown settings {unknown}; known: {sorted(_KEYWORDS)}")
    order_settings, own_seed = resolve_shuffle(shuffle, view, **settings)
    seed = seed if own_seed is None else own_seed
    n = len(view)
    sample_bytes = int(view.sample_bytes)
    batch_size, world_size = int(batch_size), int(world_size)
    if batch_size < 1 or world_size < 1 or regions < 1:
        raise ValueError("batch_size, world_size and regions must be positive")
    step = batch_size * world_size
    if n < 2 * step:
        raise ValueError(f"{view.url} has {n} samples: fewer than two global batches of {step}")

    order = EpochOrder(n, shuffle=order_settings, seed=seed, epoch=epoch)
    positions = np.arange(n, dtype=np.int64)
    idx = np.concatenate([order(positions[a : a + _CHUNK]) for a in range(0, n, _CHUNK)])
    rng = np.random.default_rng(_random_seed(seed, epoch))
    reference = rng.permutation(n)

    block, window_blocks, run = order_settings.blocks
    if order_settings.mode != "block":
        block = max(1, DEFAULT_SHUFFLE_BLOCK_BYTES // sample_bytes)
    unit_starts = np.arange(0, n, block, dtype=np.int64)
    shard_starts = _shard_starts(view, n)

    batches = n // step
    used = idx[: batches * step].reshape(batches, step)
    region_size = -(-n // regions)
    region_sizes = np.diff(np.append(np.arange(0, n, region_size, dtype=np.int64), n))
    in_regions = _distinct(used // region_size)
    blocks = _distinct(used // block)
    blocks_random = _expected_distinct(np.diff(np.append(unit_starts, n)), n, step)
    shards = shards_random = None
    if shard_starts is not None:
        shard_of = np.searchsorted(shard_starts, used, side="right") - 1
        shards = _distinct(shard_of)
        shards_random = _expected_distinct(np.diff(np.append(shard_starts, n)), n, step)

    d = (idx - positions).astype(np.float64)
    full = order_settings.mode == "full" or (
        order_settings.mode == "block" and run == 1 and block * window_blocks >= n
    )
    gets, fetched, group_bytes = _predicted_reads(
        order, idx, order_settings, n, batch_size, world_size, sample_bytes, shard_starts, read_ahead_bytes
    )
    prices = _s3_prices()
    notes = []
    if order_settings.mode == "block" and order_settings.sized is not None and block * window_blocks >= n:
        notes.append(
            "the window holds the whole dataset: this is a full shuffle, read as one group per rank "
            f"({_size(n * sample_bytes)} in memory per worker); a smaller shuffle_window_bytes bounds it"
        )
    if world_size > 1 and order_settings.sized is not None:
        amplification = fetched / max(1, (n // step) * step * sample_bytes)
        per_block = gets / max(1, -(-n // block))
        notes.append(
            f"each of the {world_size} ranks reads its share of every window through the gaps "
            f"(the other ranks' samples) of each block: {per_block:.1f} GETs per block "
            f"({per_block / world_size:.2f} per rank), and {amplification:.1f}x the "
            'samples\' bytes in all (free inside a cloud region; see "Shuffling" in '
            "docs/training.md for the trade-off)"
        )
    report = ShuffleReport(
        url=str(view.url),
        mode=order_settings.mode,
        settings={**_described(order_settings, block, sample_bytes), "regions": regions},
        num_samples=n,
        sample_bytes=sample_bytes,
        batch_size=batch_size,
        world_size=world_size,
        full_shuffle=bool(full),
        entropy=_jump_entropy(idx, n, regions),
        entropy_random=_jump_entropy(reference, n, regions),
        regions_per_batch=float(in_regions.mean()),
        regions_random=_expected_distinct(region_sizes, n, step),
        blocks_per_batch=float(blocks.mean()),
        blocks_random=blocks_random,
        shards_per_batch=None if shards is None else float(shards.mean()),
        shards_random=shards_random,
        spearman=_spearman(d, n),
        spearman_random=_spearman((reference - positions).astype(np.float64), n),
        displacement=float(np.abs(d).max()) / n,
        gets=gets,
        bytes=fetched,
        group_bytes=group_bytes,
        price=gets / 1000 * prices["get_per_1000"],
        egress=fetched / 1e9 * prices["egress_per_gb"],
        notes=notes,
    )
    report.seconds = time.perf_counter() - started
    return report


_KEYWORDS = {
    "shuffle_block_size",
    "shuffle_buffer_blocks",
    "shuffle_run_size",
    "shuffle_block_bytes",
    "shuffle_window_bytes",
    "shuffle_window_blocks",
}


def _view(view_or_url: Any, sequence_length: int | None, storage_options: dict[str, Any] | None) -> Any:
    from guideloom.storage import Storage, open_view
    from guideloom.storage.byurl import open_url

    if isinstance(view_or_url, (str, os.PathLike)):
        view_or_url = open_url(view_or_url, storage_options)
    if isinstance(view_or_url, Storage):
        return open_view(view_or_url, sequence_length)
    return view_or_url


def _random_seed(seed: int, epoch: int) -> int:
    return (int(seed) * 1_000_003 + int(epoch)) & (2**63 - 1)


def _described(settings: ShuffleSettings, block: int, sample_bytes: int) -> dict[str, Any]:
    b, g, r = settings.blocks
    return {
        "mode": settings.mode,
        "block_samples": block,
        "block_bytes": block * sample_bytes,
        "window_blocks": g if settings.mode == "block" else None,
        "window_bytes": b * g * sample_bytes if settings.mode == "block" else None,
        "run_size": r,
    }


def _shard_starts(view: Any, n: int) -> np.ndarray | None:
    """The first sample of each shard (a window belongs to the shard of its first token), or
    None where the view's samples are not the manifest's (a subset)."""
    storage = view.storage
    if storage is None:
        return None
    table = storage.manifest.shard_table
    length = view.sequence_length
    if length is None:
        counts = np.asarray(table.records, dtype=np.int64)
        if int(counts.sum()) != n:
            return None
        return np.concatenate([[0], np.cumsum(counts)[:-1]])
    tokens = np.asarray(table.tokens, dtype=np.int64)
    if int(tokens.sum()) // int(length) != n:
        return None
    first_token = np.concatenate([[0], np.cumsum(tokens)[:-1]])
    starts = np.unique(first_token // int(length))  # the window holding each shard's first token
    return starts[starts < n]


def _distinct(labels: np.ndarray) -> np.ndarray:
    """Distinct values per row."""
    s = np.sort(labels, axis=1)
    return 1 + (np.diff(s, axis=1) != 0).sum(axis=1)


def _expected_distinct(sizes: np.ndarray, n: int, draws: int) -> float:
    """E[distinct units hit] by ``draws`` samples drawn without replacement from ``n``, the units
    holding ``sizes`` samples: the sum over units of 1 - P(no draw in it)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    values, counts = np.unique(sizes, return_counts=True)
    i = np.arange(min(draws, n), dtype=np.float64)
    total = 0.0
    for size, count in zip(values, counts):
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (n - size - i) / (n - i)
        miss = 0.0 if (ratio <= 0).any() else float(np.exp(np.log(ratio).sum()))
        total += count * (1.0 - miss)
    return total


def _jump_entropy(idx: np.ndarray, n: int, regions: int) -> float:
    jumps = np.diff(idx)
    width = max(1.0, n / regions)
    bins = np.floor((jumps + n) / width).astype(np.int64)
    counts = np.bincount(bins)
    p = counts[counts > 0] / jumps.size
    return float(-(p * np.log2(p)).sum())


def _spearman(d: np.ndarray, n: int) -> float:
    """Spearman's rho of a permutation (ranks are the positions and indexes themselves)."""
    return 1.0 - 6.0 * float(np.dot(d, d)) / (n * (float(n) ** 2 - 1))


def _predicted_reads(
    order: EpochOrder,
    idx: np.ndarray,
    settings: ShuffleSettings,
    n: int,
    batch_size: int,
    world_size: int,
    sample_bytes: int,
    shard_starts: np.ndarray | None,
    read_ahead_bytes: int | None,
) -> tuple[int, int, int]:
    """(GETs, bytes, largest group bytes) of the loader's reads of one epoch over all ranks."""
    step = batch_size * world_size
    full_steps = n // step
    handed = full_steps * step
    # per batch (step, rank), then spread over its samples
    steps = np.repeat(np.arange(full_steps, dtype=np.int64), world_size)
    rank = np.tile(np.arange(world_size, dtype=np.int64), full_steps)
    if settings.sized is not None:  # one group per window (guideloom.loading.sampler)
        group = order.window_of(steps * step + rank * batch_size)
    else:  # groups of a power of two of batches, grown 1, 1, 2, 4, ... (the loader's ramp)
        budget = _READ_AHEAD_BYTES if read_ahead_bytes is None else int(read_ahead_bytes)
        fit = max(1, budget // (batch_size * sample_bytes))
        size = 1 << (fit.bit_length() - 1)
        if fit > 1:
            k = np.maximum(steps, 1)
            ramp = np.floor(np.log2(k)).astype(np.int64) + 1
            lg = size.bit_length() - 1
            group = np.where(steps == 0, 0, np.where(steps < size, ramp, lg + 1 + (steps - size) // size))
        else:
            group = steps // size
    per_batch = group * world_size + rank
    sizes = np.bincount(per_batch)
    # one sort of (group, sample) packed into one int64: a run of consecutive samples of one
    # group is one request
    spread = np.repeat(per_batch, batch_size)
    if int(per_batch.max()) < (2**62) // n:
        key, sample = np.divmod(np.sort(spread * n + idx[:handed]), n)
    else:
        ordering = np.lexsort((idx[:handed], spread))
        key, sample = spread[ordering], idx[:handed][ordering]
    # Window groups are read through every gap of at most DEFAULT_MAX_GAP bytes (the loader
    # lifts the gap budget for them: a rank's share of a window is dense in its blocks).
    bridge = DEFAULT_MAX_GAP // sample_bytes if settings.sized is not None else 0
    new = np.ones(handed, dtype=bool)
    new[1:] = (key[1:] != key[:-1]) | (sample[1:] - sample[:-1] - 1 > bridge)
    gets = int(new.sum())
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], handed) - 1
    fetched = int((sample[ends] - sample[starts] + 1).sum()) * sample_bytes
    if shard_starts is not None and shard_starts.size > 1:
        # a run of windows read from one shard to the next costs a request per shard it touches
        shard_of_first = np.searchsorted(shard_starts, sample, side="right") - 1
        crossed = np.zeros(handed, dtype=bool)
        crossed[1:] = ~new[1:] & (shard_of_first[1:] != shard_of_first[:-1])
        gets += int(crossed.sum())
    return gets, fetched, int(sizes.max()) * batch_size * sample_bytes


def _s3_prices() -> dict[str, float]:
    for backend in BACKENDS:
        if backend.key == "s3" and backend.list_prices:
            return dict(backend.list_prices)
    return {"get_per_1000": 0.0004, "egress_per_gb": 0.09}


def register(app: Any, option_help: str, parse_options: Callable[[list[str] | None], dict[str, Any]]) -> None:
    """Add ``guideloom shuffle-report`` to the command line app (`guideloom.cli`, which hands
    over its ``--option KEY=VALUE`` parsing: this module sits below it).

    Args:
        app: The typer app.
        option_help: The help text of ``--option``.
        parse_options: Turns ``--option`` pairs into storage options.
    """
    import typer

    from guideloom.errors import GuideLoomError

    @app.command(
        "shuffle-report", short_help="How random an epoch's order is, and its GETs, from the order alone."
    )
    def shuffle_report_command(
        url: str = typer.Argument(..., help="The dataset (a stream or documents), local or in a bucket."),
        sequence_length: int = typer.Option(None, "--sequence-length", help="Tokens per window (streams)."),
        shuffle: str = typer.Option("block", "--shuffle", help="none, block or full."),
        batch_size: int = typer.Option(8, "--batch-size", help="Samples per batch, per rank."),
        world_size: int = typer.Option(1, "--world-size", help="Ranks reading the dataset."),
        block_bytes: int = typer.Option(None, "--block-bytes", help="Bytes per block (default 1 MiB)."),
        window_bytes: int = typer.Option(None, "--window-bytes", help="Bytes per window (default 512 MiB)."),
        window_blocks: int = typer.Option(None, "--window-blocks", help="Blocks per window, instead."),
        seed: int = typer.Option(0, "--seed"),
        epoch: int = typer.Option(0, "--epoch"),
        as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
        option: list[str] = typer.Option(None, "--option", "-o", metavar="KEY=VALUE", help=option_help),  # noqa: B008
    ) -> None:
        """Print one epoch's order measured against a true random permutation of the same size
        (jump entropy, distinct regions, blocks and shards per batch, Spearman's rho, largest
        displacement) and its predicted GETs, bytes, read-group memory and price; nothing but
        the manifest is read (see "Shuffling" in docs/training.md)."""
        import json

        sizes = {
            "shuffle_block_bytes": block_bytes,
            "shuffle_window_bytes": window_bytes,
            "shuffle_window_blocks": window_blocks,
        }
        try:
            if shuffle not in ("none", "block", "full"):
                raise ValueError(f"--shuffle {shuffle!r}: one of none, block, full")
            report = shuffle_report(
                url, shuffle, batch_size, world_size, sequence_length=sequence_length, seed=seed,
                epoch=epoch, storage_options=parse_options(option),
                **{k: v for k, v in sizes.items() if v is not None},
            )  # fmt: skip
        except (GuideLoomError, ValueError, OSError) as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps(report.as_dict(), indent=1) if as_json else str(report))
