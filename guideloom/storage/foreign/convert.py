"""Other projects' token files written as a GuideLoom dataset: `convert_foreign`.

Each token file becomes one part of a parallel write (``storage.writer(part=k)``, then one
``storage.commit``), so the dataset gets what any GuideLoom dataset has: a manifest with every
shard's size and checksum, record starts, and a snapshot. Its records are the files' documents
(their index, a Dolma sidecar, or the text between end-of-text ids), its stream the files'
tokens in the order given, and its ``tokens`` field (with ``loss_mask`` where the files have
masks) of the files' dtype: windows, record starts and loader batches of the converted dataset
are those of the files read in place.

The parts run one after another in this process, or as Ray tasks (``guideloom.workers.convert``,
``convert --ray``) when there are many files; every part is written by `convert_part` either way.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from guideloom.formats import StreamNumpyFormat
from guideloom.manifest import Manifest
from guideloom.storage.base import StreamStorage
from guideloom.storage.foreign.records import BATCH_TOKENS, stream_records
from guideloom.storage.foreign.storage import ForeignStorage

__all__ = [
    "CONVERTED_KEY",
    "ConvertPlan",
    "convert_foreign",
    "convert_part",
    "finish_convert",
    "plan_convert",
]

CONVERTED_KEY = "converted_from"  # the manifest metadata key naming the source files
_RUN = "convert"


@dataclasses.dataclass(frozen=True)
class ConvertPlan:
    """What `convert_part` needs to write part ``k`` (picklable, for Ray tasks): the source
    opened in place, the output URL and its options."""

    source: ForeignStorage
    output: str
    storage_options: dict[str, Any] | None
    overwrite: bool
    shard_size: int | None
    batch_tokens: int = BATCH_TOKENS
    run: str = _RUN  # the parallel write's run: one of its own per conversion

    @property
    def num_parts(self) -> int:
        return len(self.source.files)

    def output_storage(self) -> StreamStorage:
        fields = self.source.format.fields  # type: ignore[attr-defined]
        return StreamStorage(self.output, StreamNumpyFormat(fields), storage_options=self.storage_options)

    def metadata(self) -> dict[str, Any]:
        source = self.source
        meta: dict[str, Any] = {
            CONVERTED_KEY: {"format": source.kind, "url": source.url, "files": [f.rel for f in source.files]}
        }
        if source.eos_id is not None:  # boundaries="eos" on the converted dataset finds it
            meta["ingest"] = {"tokenizer": {"eos_id": int(source.eos_id)}}
        return meta


def plan_convert(
    source: ForeignStorage,
    output: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    shard_size: int | None = None,
    batch_tokens: int = BATCH_TOKENS,
) -> ConvertPlan:
    """The plan of a conversion of ``source`` to ``output`` (see `convert_foreign`).

    Args:
        source: Token files opened in place (``guideloom.open(..., format=)``).
        output: The new dataset's URL or local path.
        storage_options: fsspec options of ``output``.
        overwrite: Replace a dataset already committed at ``output``.
        shard_size: Bytes per shard (None: the writer's default).
        batch_tokens: Tokens read per batch.

    Returns:
        The plan; `convert_part` writes each of its parts, `finish_convert` commits them.

    Raises:
        TypeError: ``source`` is not token files opened in place.
        ValueError: The files have no document index and ``source`` no ``eos_id``.
    """
    if not isinstance(source, ForeignStorage):
        raise TypeError(
            f"convert takes token files opened in place (guideloom.open(url, format=...)), got "
            f"{type(source).__name__}: a GuideLoom dataset needs no conversion"
        )
    if not source.has_starts and source.eos_id is None:
        raise ValueError(
            f"{source.url}: {source.kind} files have no document index, so the converted "
            "dataset's records (its documents) are cut after each end-of-text id: pass eos_id= "
            "(--eos-id; GPT-2's is 50256)"
        )
    options = dict(storage_options) if storage_options else None
    run = f"{_RUN}-{secrets.token_hex(6)}"
    return ConvertPlan(source, os.fspath(output), options, overwrite, shard_size, batch_tokens, run)


def convert_part(plan: ConvertPlan, k: int) -> int:
    """Write part ``k`` of ``plan``: the documents of its ``k``-th token file.

    Args:
        plan: From `plan_convert`.
        k: The part (and file) number, ``0 .. plan.num_parts - 1``.

    Returns:
        The records (documents) written.
    """
    source = plan.source
    one = ForeignStorage(
        source.location,
        [source.files[k]],
        kind=source.kind,
        dtype=source.format.fields["tokens"],  # type: ignore[attr-defined]
        eos_id=source.eos_id,
        description=source.location.describe(source.files[k].rel),
    )
    extra: dict[str, Any] = {} if plan.shard_size is None else {"shard_size": plan.shard_size}
    records = 0
    writer = plan.output_storage().writer(part=k, run=plan.run, overwrite=plan.overwrite, **extra)
    with writer:
        if source.files[k].tokens:
            for fields, lengths in stream_records(one, eos_id=source.eos_id, batch_tokens=plan.batch_tokens):
                records += writer.append_batch(fields, lengths)
    return records


def finish_convert(plan: ConvertPlan) -> Manifest:
    """Commit the parts of ``plan`` (written by `convert_part`): the dataset's manifest.

    Args:
        plan: From `plan_convert`.

    Returns:
        The committed manifest.
    """
    return plan.output_storage().commit(plan.num_parts, plan.metadata(), run=plan.run)


def convert_foreign(
    source: ForeignStorage,
    output: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    shard_size: int | None = None,
    run_parts: Callable[[ConvertPlan], None] | None = None,
) -> Manifest:
    """Write token files opened in place as a GuideLoom stream dataset at ``output``.

    Args:
        source: Token files opened in place (``guideloom.open(..., format=)``).
        output: The new dataset's URL or local path.
        storage_options: fsspec options of ``output`` (the source keeps its own).
        overwrite: Replace a dataset already committed at ``output``.
        shard_size: Bytes per shard (None: the writer's default).
        run_parts: Writes every part of a plan (``guideloom.workers.convert.ray_parts`` runs
            them as Ray tasks); None: one after another, here.

    Returns:
        The committed manifest.

    Raises:
        TypeError: ``source`` is not token files opened in place.
        ValueError: The files have no document index and ``source`` no ``eos_id``.
        DatasetExistsError: A dataset is committed at ``output`` and ``overwrite`` is off.
    """
    plan = plan_convert(
        source, output, storage_options=storage_options, overwrite=overwrite, shard_size=shard_size
    )
    if run_parts is None:
        for k in range(plan.num_parts):
            convert_part(plan, k)
    else:
        run_parts(plan)
    return finish_convert(plan)
