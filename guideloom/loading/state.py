"""The loader's persisted state: a small, versioned, validated dict (no torch).

``StatefulDataLoader.state_dict()`` returns::

    {"guideloom_loader": {
        "version": 3,
        "layout": "stream",             # "documents" | "stream" | "stream_with_meta"
        "fingerprint": "…",             # the manifest's content fingerprint (not the URL)
        "num_samples": 48828,           # windows or documents in one epoch
        "sequence_length": 2048,        # None for documents
        "seed": 0,
        "shuffle": "block",             # "none" | "full" | "block"
        "shuffle_block_size": 512,      # samples; None unless shuffle == "block"
        "shuffle_buffer_blocks": 512,   # blocks per window; None unless shuffle == "block"
        "shuffle_run_size": 1,          # 1 for the byte-sized block shuffle (#34); None unless "block"
        "epoch": 3,
        "position": 1024,               # samples handed out in this epoch over all ranks
        "finished": False,              # the pass ended (the loop saw its end): see below
        "batch_size": 8,                # informational: may differ on resume
        "world_size": 4,                # informational: may differ on resume
        "drop_last": False,             # informational: may differ on resume
        "snapshot": "00000003-…",       # the dataset snapshot read (not for mixtures; optional)
        "source_snapshots": [...],      # a mixture's: each source's snapshot (optional)
        "url": "s3://…",                # where it was read (redacted; optional, for messages)
        "files": [["a.bin", "[size, etag, mtime]"], ...],  # files read in place (optional)
    }}

Everything from ``layout`` to ``shuffle_run_size`` must match the loader that loads the state, or
loading raises `guideloom.errors.ResumeStateError`; the last three may change (elastic resume).

The end of an epoch follows torchdata's ``StatefulDataLoader``: ``position`` counts what the loop
has received, so a state saved inside the loop at an epoch's last batch has the epoch's last
position and ``finished`` false. Loaded, its next pass is *empty* (nothing of that epoch is left)
and the pass after it starts ``epoch + 1``. A state saved after the loop ended (the pass raised
``StopIteration``) has ``finished`` true: loaded, its next pass starts ``epoch + 1``. So the
usual ``for epoch in range(start_epoch, num_epochs): for batch in loader: ...`` loop, resumed
from a checkpoint of either kind with the epoch counter saved beside it, trains every epoch
exactly once.

Version 4 is version 3 with ``skipped`` (steps left out by ``skip_steps``, see below): a
GuideLoom that reads only up to version 3 refuses such a state by name instead of training the
skipped steps. A state without skips is still written as version 3.

Older versions, migrated on load (`LoaderState.from_dict`):

- Version 1 had no ``shuffle_run_size``; its block order is the one of ``shuffle_run_size=1``, so
  a version-1 state loads as that (a loader built with ``shuffle_run_size=1`` continues it
  exactly).
- Versions 1 and 2 had no ``finished``: under their rule a state with nothing of its epoch left
  for the loader (``position == num_samples``, or only the end-of-epoch remainder that the
  loader's ranks and ``drop_last`` leave out) started ``epoch + 1`` at once, whether it was saved
  at the last batch or after the loop. Such states keep doing so (`LoaderState.next_pass`: they
  load as ``epoch + 1``, position 0), so checkpoints written before version 3 resume as they did.

A loader over a `guideloom.loading.mixture.Mixture` adds one key (absent otherwise)::

        "mixture": {"stopping_strategy": "all_exhausted",
                    "sources": [[48828, 3, 0], ...],      # per source: samples, weight, start draw
                    "fingerprints": ["…", ...],           # per source: manifest fingerprint
                    "schedule": "quota"},                 # only when it is not "tree"

A loader also records what it has delivered, for ``source_counts()`` (optional: states saved
before it existed load, see `LoaderState.delivered_before`)::

        "delivered": {"samples": [61, 27, 9],   # per source: samples of the epochs before `epoch`
                      "positions": 64},          # positions of `epoch` actually handed out

``positions`` equals ``position`` except at an epoch's end, where ``position`` is the epoch's
length and the remainder the ranks and ``drop_last`` left out was not handed out (a state whose
``position`` was edited away from the end counts its ``position``). ``samples`` describes the
state as saved: edit it with ``epoch``, or delete the key.

A loader that was told to leave steps out (``skip_steps``) records them, per epoch, as position
ranges (version 4; a skip that crosses an epoch boundary is one entry per epoch)::

        "skipped": [[3, 40, 64], [4, 0, 8]],    # [epoch, first position, end position]

For a mixture, ``fingerprint`` and ``num_samples`` are the mixture's (a hash of this key, and the
mixture epoch's length). It must match too; a mismatch names the source that differs
(`mixture_difference`).
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from guideloom.errors import ResumeStateError
from guideloom.loading.order import ShuffleSettings
from guideloom.types import DatasetView

__all__ = [
    "STATE_KEY",
    "STATE_VERSION",
    "LoaderState",
    "OrderIdentity",
    "expired_cause",
    "mixture_difference",
]

STATE_KEY = "guideloom_loader"
STATE_VERSION = 4  # written when the state has "skipped" (else 3: see the module docstring)
_PLAIN_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3, 4)

_MUST_MATCH = (
    ("layout", "storage layout"),
    ("fingerprint", "dataset content (manifest fingerprint)"),
    ("sequence_length", "sequence_length"),
    ("num_samples", "number of samples"),
    ("seed", "seed"),
    ("shuffle", "shuffle mode"),
    ("shuffle_block_size", "shuffle_block_size"),
    ("shuffle_buffer_blocks", "shuffle_buffer_blocks"),
    ("shuffle_run_size", "shuffle_run_size"),
)

_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "layout": (str,),
    "fingerprint": (str,),
    "num_samples": (int,),
    "sequence_length": (int, type(None)),
    "seed": (int,),
    "shuffle": (str,),
    "shuffle_block_size": (int, type(None)),
    "shuffle_buffer_blocks": (int, type(None)),
    "shuffle_run_size": (int, type(None)),
    "epoch": (int,),
    "position": (int,),
    "finished": (bool,),  # version 3
    "batch_size": (int,),
    "world_size": (int,),
    "drop_last": (bool,),
}


def snapshot_of(view: DatasetView) -> str | None:
    """The id of the dataset snapshot a view reads (None for a view without a storage); a
    wrapping view (subsets, boundaries) forwards its inner view's storage."""
    snapshot = None if view.storage is None else view.storage.current_snapshot
    return None if snapshot is None else str(snapshot.id)  # files read in place have none


@dataclass(frozen=True)
class OrderIdentity:
    """What identifies a loader's data and order: a saved state must match it to continue."""

    layout: str
    fingerprint: str
    num_samples: int
    sequence_length: int | None
    seed: int
    shuffle: ShuffleSettings
    mixture: dict[str, Any] | None = None
    # The snapshot of the dataset the loader read (not part of the identity: the fingerprint
    # is); named in the message when a state meets a dataset that has changed since.
    snapshot: str | None = None
    url: str | None = None
    # A mixture's: each source's snapshot, in source order (None for a source without one).
    source_snapshots: tuple[str | None, ...] | None = None
    # Files read in place (`guideloom.storage.foreign`): each one's (path, identity), to name
    # the file that changed under a state (not part of the identity: the fingerprint is).
    files: tuple[tuple[str, str], ...] | None = field(default=None, compare=False)

    @classmethod
    def of_view(
        cls, view: Any, mixture: Any, *, num_samples: int, seed: int, shuffle: ShuffleSettings
    ) -> OrderIdentity:
        """The identity of an order over ``view`` (``mixture``: the view, when it is a
        `MixtureDataset`; its sources' snapshots and URLs are in its own identity)."""
        return cls(
            layout=view.layout,
            fingerprint=view.fingerprint,
            num_samples=num_samples,
            sequence_length=view.sequence_length,
            seed=seed,
            shuffle=shuffle,
            mixture=mixture.identity if mixture else None,
            snapshot=None if mixture else snapshot_of(view),
            url=None if mixture else view.url,
            source_snapshots=tuple(snapshot_of(v) for v in mixture.views) if mixture else None,
            files=None if mixture else files_of(view),
        )

    def fields(self) -> dict[str, Any]:
        """The identity as the state's flat keys (``layout`` .. ``shuffle_run_size``)."""
        return {
            "layout": self.layout,
            "fingerprint": self.fingerprint,
            "num_samples": self.num_samples,
            "sequence_length": self.sequence_length,
            "seed": self.seed,
            "shuffle": self.shuffle.mode,
            "shuffle_block_size": self.shuffle.block_size,
            "shuffle_buffer_blocks": self.shuffle.buffer_blocks,
            "shuffle_run_size": self.shuffle.run_size,
        }

    def check_continues(self, current: OrderIdentity, source_names: Sequence[str] = ()) -> None:
        """Raise `ResumeStateError` unless this (saved) identity is ``current``'s, naming what
        differs: for a mixture the source (``source_names``: the mixture's names), else the field."""
        if self.mixture != current.mixture:
            raise ResumeStateError(mixture_difference(self.mixture, current.mixture, source_names))
        saved_fields, current_fields = self.fields(), current.fields()
        for name, what in _MUST_MATCH:
            saved, now = saved_fields[name], current_fields[name]
            if saved != now:
                hint = ""
                changed = _changed_file(self.files, current.files) if name == "fingerprint" else ""
                if changed:
                    hint = changed
                elif name == "fingerprint" and self.snapshot not in (None, current.snapshot):
                    where = f"{self.url!r}, fmt" if self.url else "url, fmt"
                    hint = (
                        f" The state was saved on snapshot {self.snapshot} of the dataset, and it has"
                        f" changed since (now snapshot {current.snapshot}). To resume exactly,"
                        f" build the loader on the pinned snapshot: from_storage(XStorage({where},"
                        f" snapshot={self.snapshot!r}), ...)."
                    )
                elif name == "fingerprint" and _subset_base(saved) == _subset_base(now):
                    hint = (
                        f" The state was saved on another subset of the same dataset ("
                        f"{_subset_part(saved)} then, {_subset_part(now)} now): give from_storage"
                        " the skip=, take=, holdout= (and holdout_seed=, held_out=) of that run."
                    )
                elif name == "fingerprint":
                    hint = (
                        " The state was saved over a dataset with other content; moving the same"
                        " dataset to another URL or bucket keeps the fingerprint."
                    )
                elif name.startswith("shuffle"):
                    hint = _shuffle_hint(self.shuffle, current.shuffle)
                raise ResumeStateError(
                    f"the loader state was saved with {what} {saved!r}, but this loader has "
                    f"{now!r}; it cannot continue that order.{hint} Build the loader with the "
                    "settings of the run that saved the state, or start without loading it."
                )


def _shuffle_hint(saved: ShuffleSettings, now: ShuffleSettings) -> str:
    """The fix for a state saved with other shuffle settings: the keywords that rebuild its
    order exactly (sample counts rebuild any block order, the byte-sized one's too)."""
    if saved.mode != "block":
        return f" Build the loader with shuffle={saved.mode!r}."
    block, buffer, run = saved.blocks
    hint = (
        f" Build the loader with shuffle='block', shuffle_block_size={block}, "
        f"shuffle_buffer_blocks={buffer}, shuffle_run_size={run} to continue it exactly"
    )
    if run != 1:
        hint += " (the block order of GuideLoom before the byte-sized block shuffle)"
    elif now.sized is not None and now.block_size:
        sample = now.sized[0] // now.block_size
        hint += (
            f" (the byte-sized block shuffle with shuffle_block_bytes={block * sample}, "
            f"shuffle_window_blocks={buffer} gives the same order)"
        )
    return hint + "."


@dataclass(frozen=True)
class LoaderState:
    """Where a loader is in its order: ``identity``, the epoch and the position in it.

    ``finished``: the pass ended (see the module docstring); None for a state of version 1 or
    2, saved under their end-of-epoch rule. ``batch_size``, ``world_size`` and ``drop_last``
    are the saving loader's, recorded for information.
    """

    identity: OrderIdentity
    epoch: int
    position: int
    batch_size: int
    world_size: int
    drop_last: bool
    finished: bool | None = False
    # per source: samples delivered in the epochs before `epoch`; positions of `epoch` handed
    # out (None: a state saved before they were recorded)
    samples_before: tuple[int, ...] | None = None
    handed_out: int | None = None
    # steps left out with ``skip_steps``: (epoch, first position, end position) over all ranks
    skipped: tuple[tuple[int, int, int], ...] = ()

    def delivered_before(self, consumed: Callable[[int], int]) -> tuple[list[int] | None, int]:
        """``(samples per source before this epoch, or None, positions of this epoch handed out)``.

        For a state saved before GuideLoom recorded them, ``consumed(start)`` (the positions a
        pass from ``start`` hands out under the saving loader's batch size, world size and
        ``drop_last``) gives this epoch's; the caller counts the earlier epochs the same way.
        """
        if self.handed_out is not None:
            return (list(self.samples_before) if self.samples_before is not None else None), self.handed_out
        if self.position == self.identity.num_samples:
            return None, consumed(0)
        return None, self.position

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "version": STATE_VERSION if self.skipped else _PLAIN_VERSION,
            **self.identity.fields(),
            "epoch": self.epoch,
            "position": self.position,
            "finished": bool(self.finished),
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "drop_last": self.drop_last,
        }
        if self.identity.mixture is not None:
            fields["mixture"] = copy.deepcopy(self.identity.mixture)
        if self.samples_before is not None and self.handed_out is not None:
            fields["delivered"] = {"samples": list(self.samples_before), "positions": self.handed_out}
        if self.skipped:
            fields["skipped"] = [list(s) for s in self.skipped]
        if self.identity.snapshot is not None:
            fields["snapshot"] = self.identity.snapshot
            fields["url"] = self.identity.url
        if self.identity.files is not None:
            fields["files"] = [list(f) for f in self.identity.files]
        if self.identity.source_snapshots is not None and any(self.identity.source_snapshots):
            fields["source_snapshots"] = list(self.identity.source_snapshots)
        return {STATE_KEY: fields}

    def next_pass(self, batches_left: Callable[[int], int]) -> tuple[int, int]:
        """``(epoch, position)`` at which the loading loader's next pass starts.

        ``batches_left(position)``: how many batches of the epoch that loader still has from
        ``position`` (its ranks, batch size and ``drop_last`` decide). A finished pass (which
        ends at the epoch's last position) moves to the next epoch; an unfinished one stays, so
        a state at an epoch's last batch gives an empty pass, and a state whose position was
        edited away from the end continues there. A version-1/2 state keeps its own rule:
        nothing left means the next epoch.
        """
        if self.finished and self.position == self.identity.num_samples:
            return self.epoch + 1, 0
        if self.finished is None and self.position > 0 and batches_left(self.position) == 0:
            return self.epoch + 1, 0
        return self.epoch, self.position

    @classmethod
    def from_dict(cls, state: Any) -> LoaderState:
        """Parse a saved state; every problem is a `ResumeStateError` saying what is wrong."""
        if not isinstance(state, dict) or STATE_KEY not in state:
            keys = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
            raise ResumeStateError(
                f"not a GuideLoom loader state: expected a dict with key {STATE_KEY!r}, got {keys}. "
                "Pass what guideloom's StatefulDataLoader.state_dict() returned, saved whole."
            )
        inner = state[STATE_KEY]
        if not isinstance(inner, dict):
            raise ResumeStateError(f"corrupt loader state: {STATE_KEY!r} is not a dict")
        version = inner.get("version")
        if isinstance(version, bool) or version not in _READABLE_VERSIONS:
            raise ResumeStateError(
                f"loader state version {version!r} is not supported (this GuideLoom reads "
                f"versions {', '.join(map(str, _READABLE_VERSIONS))})"
            )
        if version == 1 and "shuffle_run_size" not in inner:
            # version 1 permuted single samples inside a buffer: run size 1
            inner = {**inner, "shuffle_run_size": 1 if inner.get("shuffle") == "block" else None}
        expected = {k: v for k, v in _FIELD_TYPES.items() if version >= 3 or k != "finished"}
        missing = [name for name in expected if name not in inner]
        if missing:
            raise ResumeStateError(f"truncated loader state: missing {', '.join(missing)}")
        for name, types in expected.items():
            value = inner[name]
            is_bool = isinstance(value, bool)
            if not isinstance(value, types) or (is_bool and bool not in types):
                raise ResumeStateError(
                    f"corrupt loader state: {name}={value!r} should be of type "
                    f"{' or '.join(t.__name__ for t in types)}"
                )
        try:
            shuffle = ShuffleSettings(
                inner["shuffle"],
                inner["shuffle_block_size"],
                inner["shuffle_buffer_blocks"],
                inner["shuffle_run_size"],
            )
        except ValueError as err:
            raise ResumeStateError(f"corrupt loader state: {err}") from None
        identity = OrderIdentity(
            layout=inner["layout"],
            fingerprint=inner["fingerprint"],
            num_samples=inner["num_samples"],
            sequence_length=inner["sequence_length"],
            seed=inner["seed"],
            shuffle=shuffle,
            mixture=_mixture_section(inner.get("mixture")),
            snapshot=inner["snapshot"] if isinstance(inner.get("snapshot"), str) else None,
            url=inner["url"] if isinstance(inner.get("url"), str) else None,
            source_snapshots=_source_snapshots(inner.get("source_snapshots")),
            files=_files(inner.get("files")),
        )
        # the optional sections parsed first and the state made once (dataclasses.replace
        # costs as much as the rest of a resume's parsing)
        samples: tuple[int, ...] | None = None
        positions: int | None = None
        if "delivered" in inner:
            sources = len(identity.mixture["sources"]) if identity.mixture is not None else 1
            samples, positions = _delivered_section(
                inner["delivered"], sources, inner["position"], identity.num_samples
            )
        result = cls(
            identity,
            epoch=inner["epoch"],
            position=inner["position"],
            batch_size=inner["batch_size"],
            world_size=inner["world_size"],
            drop_last=inner["drop_last"],
            finished=inner["finished"] if version >= 3 else None,
            samples_before=samples,
            handed_out=positions,
            skipped=_skipped_section(inner["skipped"], identity.num_samples) if "skipped" in inner else (),
        )
        if result.epoch < 0 or not 0 <= result.position <= identity.num_samples:
            raise ResumeStateError(
                f"corrupt loader state: epoch={result.epoch}, position={result.position} "
                f"(positions lie in [0, {identity.num_samples}])"
            )
        return result


def _skipped_section(section: Any, num_samples: int) -> tuple[tuple[int, int, int], ...]:
    """Validate the optional ``skipped`` key: ``[[epoch, first position, end position], ...]``."""
    ok = isinstance(section, list) and all(
        isinstance(s, list)
        and len(s) == 3
        and all(type(x) is int for x in s)
        and s[0] >= 0
        and 0 <= s[1] < s[2] <= num_samples
        for s in section
    )
    if not ok:
        raise ResumeStateError(
            "corrupt loader state: 'skipped' should be a list of [epoch, first position, end "
            f"position] with 0 <= first < end <= {num_samples} (what skip_steps recorded); restore "
            "it from the checkpoint as saved"
        )
    return tuple((s[0], s[1], s[2]) for s in section)


def _delivered_section(
    section: Any, sources: int, position: int, num_samples: int
) -> tuple[tuple[int, ...], int]:
    """Validate the optional ``delivered`` key (see the module docstring)."""
    ok = (
        isinstance(section, dict)
        and isinstance(section.get("samples"), list)
        and len(section["samples"]) == sources
        and all(type(x) is int and x >= 0 for x in section["samples"])
        and type(section.get("positions")) is int
        and section["positions"] >= 0
    )
    if not ok:
        raise ResumeStateError(
            f"corrupt loader state: 'delivered' should hold samples (a list of {sources} "
            "non-negative ints, one per source) and positions (a non-negative int); delete the "
            "'delivered' key to load the state (source_counts() then assumes every earlier epoch "
            "was read with the saving loader's batch size and world size)"
        )
    # ``positions`` only says something at an epoch's end; a state whose position was edited
    # (moved back, say) has handed out exactly its position
    positions = section["positions"] if section["positions"] <= position == num_samples else position
    return tuple(section["samples"]), positions


def _mixture_section(section: Any) -> dict[str, Any] | None:
    """Validate the optional ``mixture`` key (see the module docstring)."""
    if section is None:
        return None
    ok = (
        isinstance(section, dict)
        and isinstance(section.get("stopping_strategy"), str)
        and isinstance(section.get("sources"), list)
        and isinstance(section.get("fingerprints"), list)
        and len(section["sources"]) == len(section["fingerprints"]) >= 1
        and all(isinstance(f, str) for f in section["fingerprints"])
        and all(
            isinstance(s, list) and len(s) == 3 and all(type(x) is int and x >= 0 for x in s)
            for s in section["sources"]
        )
        and section.get("schedule", "quota") == "quota"
        and (
            "repeat" not in section
            or (
                isinstance(section["repeat"], list)
                and len(section["repeat"]) == len(section["sources"])
                and all(isinstance(r, (int, float)) and r > 0 for r in section["repeat"])
            )
        )
    )
    if not ok:
        raise ResumeStateError(
            "corrupt loader state: 'mixture' should hold stopping_strategy, sources "
            "([samples, weight, start] per source), fingerprints and, when it is not 'tree', "
            "schedule ('quota'), and repeat (passes per source) where a source has one"
        )
    keys = ("stopping_strategy", "sources", "fingerprints", "schedule", "repeat")
    return {k: section[k] for k in keys if k in section}


def mixture_difference(
    saved: dict[str, Any] | None, current: dict[str, Any] | None, names: Sequence[str] = ()
) -> str:
    """The message of the ResumeStateError for a state whose mixture differs from the loader's.

    ``saved`` and ``current`` are mixture sections (None: a single dataset); ``names`` the
    current mixture's source names, for the message."""
    fix = " Build the mixture as the run that saved the state did, or start without loading it."
    if saved is None:
        return (
            "the loader state was saved by a loader over a single dataset, but this loader reads a Mixture."
            + fix
        )
    if current is None:
        return (
            "the loader state was saved by a loader over a Mixture, but this loader reads a single dataset."
            + fix
        )
    if saved["stopping_strategy"] != current["stopping_strategy"]:
        return (
            f"the loader state was saved with stopping_strategy {saved['stopping_strategy']!r}, but this "
            f"mixture has {current['stopping_strategy']!r}." + fix
        )
    old, new = saved["sources"], current["sources"]
    then, now = saved.get("schedule", "tree"), current.get("schedule", "tree")
    if then != now and [s[:2] for s in old] == [s[:2] for s in new]:
        return (
            f"the loader state was saved with the {then!r} schedule, but this mixture deals its "
            f"positions by {now!r} (schedule='auto' takes 'quota' where the 'tree' is not within "
            f"one sample; states saved before GuideLoom had 'quota' are 'tree'). Build the "
            f"Mixture with schedule={then!r} to continue that run exactly."
        )
    if len(old) != len(new):
        return (
            f"the loader state was saved from a mixture of {len(old)} sources, but this one has {len(new)}."
            + fix
        )
    ones = [1.0] * len(new)
    if saved.get("repeat", ones) != current.get("repeat", ones):
        return (
            f"the loader state was saved with the sources' repeat limits {saved.get('repeat', ones)}, "
            f"but this mixture has {current.get('repeat', ones)} (in source order)." + fix
        )
    label = [f"source {names[i]!r}" if i < len(names) else f"source {i}" for i in range(len(new))]
    for i, (o, n, fo, fn) in enumerate(zip(old, new, saved["fingerprints"], current["fingerprints"])):
        if fo != fn:
            return (
                f"{label[i]} holds other data than when the state was saved (fingerprint {fo} vs {fn})." + fix
            )
        if o[0] != n[0]:
            return f"{label[i]} had {o[0]} samples when the state was saved, but has {n[0]} now." + fix
    old_total, new_total = sum(s[1] for s in old), sum(s[1] for s in new)
    if any(o[1] * new_total != n[1] * old_total for o, n in zip(old, new)):
        then = ", ".join(f"{label[i]} {o[1] / old_total:.6g}" for i, o in enumerate(old))
        now = ", ".join(f"{label[i]} {n[1] / new_total:.6g}" for i, n in enumerate(new))
        return (
            f"the weights differ: the state was saved with the shares {then}; this mixture has {now}. "
            "To change weights going forward, build the new Mixture with after=<that state> (a "
            "curriculum step, see docs/mixing.md)." + fix
        )
    for i, (o, n) in enumerate(zip(old, new)):
        if o[2] != n[2]:
            return (
                f"{label[i]} started at draw {o[2]} in the saved run, but at {n[2]} now (another "
                "after= state)." + fix
            )
    return "the loader state was saved from another mixture." + fix


def files_of(view: DatasetView) -> tuple[tuple[str, str], ...] | None:
    """The ``(path, identity)`` of each file a view's dataset read in place is made of, or None."""
    found = None if view.storage is None else view.storage.file_identities()
    return None if found is None else tuple((str(p), str(i)) for p, i in found)


def _files(value: Any) -> tuple[tuple[str, str], ...] | None:
    """A state's ``files`` (``[[path, identity], ...]``), or None where it has none."""
    if not isinstance(value, list) or not all(
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v) for v in value
    ):
        return None
    return tuple((v[0], v[1]) for v in value)


def _describe_identity(identity: str) -> str:
    try:
        size, tag, when = json.loads(identity)
    except (ValueError, TypeError):
        return identity
    if tag:
        return f"{size} bytes, ETag {tag}"
    if isinstance(when, (int, float)):
        stamp = datetime.datetime.fromtimestamp(when, datetime.timezone.utc).isoformat(timespec="seconds")
        return f"{size} bytes, modified {stamp}"
    return f"{size} bytes"


def _changed_file(
    saved: tuple[tuple[str, str], ...] | None, current: tuple[tuple[str, str], ...] | None
) -> str:
    """The message part naming the file read in place that differs between a saved state and
    now ("" where neither records files, or none differs)."""
    if saved is None or current is None:
        return ""
    then, now = dict(saved), dict(current)
    for path, identity in current:
        if path in then and then[path] != identity:
            return (
                f" The file {path} has changed since the state was saved ({_describe_identity(then[path])}"
                f" then, {_describe_identity(identity)} now), so the windows the state counts are not"
                " the same tokens. To resume exactly, put back the version the run read (same size"
                " and content; a copy keeps the ETag, a local file's modification time too with"
                " `cp -p`), or start this run without loading the state."
            )
    gone = [p for p, _ in saved if p not in now]
    added = [p for p, _ in current if p not in then]
    if gone or added or [p for p, _ in saved] != [p for p, _ in current]:
        return (
            f" The state was saved over other files ({', '.join(gone[:3]) or 'none'} missing now,"
            f" {', '.join(added[:3]) or 'none'} new, or another order): open the same files in the"
            " same order as the run that saved it, or start without loading the state."
        )
    return ""


def _source_snapshots(value: Any) -> tuple[str | None, ...] | None:
    """A state's ``source_snapshots`` (a list of ids or nulls), or None where it has none."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(v is None or isinstance(v, str) for v in value):
        raise ResumeStateError(
            f"corrupt loader state: source_snapshots must be a list of snapshot ids, got {value!r}"
        )
    return tuple(value)


def _subset_base(fingerprint: Any) -> str:
    """A fingerprint without the subset named in it (`guideloom.storage.subset.Subset`)."""
    return str(fingerprint).split("[", 1)[0]


def _subset_part(fingerprint: Any) -> str:
    """The subset a fingerprint names ("all of it" when none)."""
    text = str(fingerprint)
    return text.split("[", 1)[1].rstrip("]") if "[" in text else "all of it"


def expired_cause(err: Exception) -> str:
    """An expired snapshot's error without its advice to pick a kept snapshot: a saved state
    cannot be resumed on another snapshot, so a resume error gives its own fixes."""
    return str(err).split(". Pick a kept one")[0]
