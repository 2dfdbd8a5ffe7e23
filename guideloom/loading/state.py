"""The loader's persisted state: a small, versioned, validated dict (no torch).

``StatefulDataLoader.state_dict()`` returns::

    {"guideloom_loader": {
        "version": 2,
        "layout": "stream",             # "documents" | "stream" | "stream_with_meta"
        "fingerprint": "…",             # the manifest's content fingerprint (not the URL)
        "num_samples": 48828,           # windows or documents in one epoch
        "sequence_length": 2048,        # None for documents
        "seed": 0,
        "shuffle": "block",             # "none" | "full" | "block"
        "shuffle_block_size": 64,       # None unless shuffle == "block"
        "shuffle_buffer_blocks": 4,     # None unless shuffle == "block"
        "shuffle_run_size": 8,          # None unless shuffle == "block"
        "epoch": 3,
        "position": 1024,               # samples handed out in this epoch over all ranks
        "batch_size": 8,                # informational: may differ on resume
        "world_size": 4,                # informational: may differ on resume
        "drop_last": False,             # informational: may differ on resume
    }}

``position == num_samples`` means the epoch is complete: iterating again starts ``epoch + 1``.
Everything above ``epoch`` must match the loader that loads the state, or loading raises
`guideloom.errors.ResumeStateError`; the last three may change (elastic resume).

A loader over a `guideloom.loading.mixture.Mixture` adds one key (absent otherwise)::

        "mixture": {"stopping_strategy": "all_exhausted",
                    "sources": [[48828, 3, 0], ...],      # per source: samples, weight, start draw
                    "fingerprints": ["…", ...],           # per source: manifest fingerprint
                    "schedule": "quota"},                 # only when it is not "tree"

and then ``fingerprint`` and ``num_samples`` are the mixture's (a hash of this key, and the
mixture epoch's length). It must match too; a mismatch names the source that differs.

Version 1 had no ``shuffle_run_size``; its block order is the one of ``shuffle_run_size=1``, so a
version-1 state loads as that (a loader built with ``shuffle_run_size=1`` continues it exactly).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from guideloom.errors import ResumeStateError

__all__ = ["STATE_KEY", "STATE_VERSION", "LoaderState"]

STATE_KEY = "guideloom_loader"
STATE_VERSION = 2
_READABLE_VERSIONS = (1, 2)

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
    "batch_size": (int,),
    "world_size": (int,),
    "drop_last": (bool,),
}


@dataclass(frozen=True)
class LoaderState:
    """What identifies the data order (the first nine fields) and where in it the loader is."""

    layout: str
    fingerprint: str
    num_samples: int
    sequence_length: int | None
    seed: int
    shuffle: str
    shuffle_block_size: int | None
    shuffle_buffer_blocks: int | None
    shuffle_run_size: int | None
    epoch: int
    position: int
    batch_size: int
    world_size: int
    drop_last: bool
    mixture: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        if fields["mixture"] is None:
            del fields["mixture"]
        return {STATE_KEY: {"version": STATE_VERSION, **fields}}

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
        missing = [name for name in _FIELD_TYPES if name not in inner]
        if missing:
            raise ResumeStateError(f"truncated loader state: missing {', '.join(missing)}")
        for name, types in _FIELD_TYPES.items():
            value = inner[name]
            is_bool = isinstance(value, bool)
            if not isinstance(value, types) or (is_bool and bool not in types):
                raise ResumeStateError(
                    f"corrupt loader state: {name}={value!r} should be of type "
                    f"{' or '.join(t.__name__ for t in types)}"
                )
        fields = {name: inner[name] for name in _FIELD_TYPES}
        result = cls(**fields, mixture=_mixture_section(inner.get("mixture")))
        if result.epoch < 0 or not 0 <= result.position <= result.num_samples:
            raise ResumeStateError(
                f"corrupt loader state: epoch={result.epoch}, position={result.position} "
                f"(positions lie in [0, {result.num_samples}])"
            )
        return result

    def check_compatible(self, current: LoaderState) -> None:
        """Raise `ResumeStateError` if this saved state does not belong to ``current``."""
        if self.mixture != current.mixture:
            from guideloom.loading.mixture import mixture_difference

            raise ResumeStateError(mixture_difference(self.mixture, current.mixture))
        for name, what in _MUST_MATCH:
            saved, now = getattr(self, name), getattr(current, name)
            if saved != now:
                hint = ""
                if name == "fingerprint":
                    hint = (
                        " The state was saved over a dataset with other content; moving the same"
                        " dataset to another URL or bucket keeps the fingerprint."
                    )
                raise ResumeStateError(
                    f"the loader state was saved with {what} {saved!r}, but this loader has "
                    f"{now!r}; it cannot continue that order.{hint} Build the loader with the "
                    "settings of the run that saved the state, or start without loading it."
                )


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
    )
    if not ok:
        raise ResumeStateError(
            "corrupt loader state: 'mixture' should hold stopping_strategy, sources "
            "([samples, weight, start] per source), fingerprints and, when it is not 'tree', "
            "schedule ('quota')"
        )
    keys = ("stopping_strategy", "sources", "fingerprints", "schedule")
    return {k: section[k] for k in keys if k in section}
