"""The ingestion job description: one frozen pydantic model, from CLI flags or a YAML job file.

Every option that changes the bytes written is part of the job's *identity* (see
`IngestConfig.identity`): a re-run with the same identity resumes, another identity is a
different dataset. Options that only say where or how fast to run (Ray address, worker count,
progress style, credentials) are not.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from guideloom.errors import IngestError, PluginError
from guideloom.types import DOCUMENTS, STREAM, STREAM_WITH_META, Layout, Tokenizer, layout_named
from guideloom.workers.readers import INPUT_READERS
from guideloom.workers.tokenizer import check_spec, check_tokenizer

__all__ = ["IngestConfig", "load_job_file", "read_job_file", "validate_config", "MiB"]

MiB = 2**20
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


_RECORDED_LAYOUT: dict[str, str] = {
    STREAM: "stream",
    DOCUMENTS: "document",
    STREAM_WITH_META: "stream-with-meta",
}


class IngestConfig(BaseModel):
    """What to ingest, how to tokenize it and where to write it.

    Sizes are in bytes. ``part_size`` is how much input (compressed bytes as stored) one part
    reads; it is what makes planning deterministic and independent of the number of workers.

    The fields are the keys of a YAML job file and the keyword arguments of `ingest_dataset`.
    Build one with `validate_config` (or `load_job_file`) to get an `IngestError` that names
    every bad option, instead of pydantic's `ValidationError`.

    Attributes:
        inputs: Paths, globs or fsspec URLs of the inputs (at least one).
        output: The dataset URL or local folder to write.
        input_format: `"auto"` (from the file name), `"jsonl"`, `"parquet"`, `"text"`,
            `"chat"` (JSON Lines or Parquet records holding a list of messages), or the name of
            an input reader a package registered (`guideloom.workers.readers.INPUT_READERS`).
        messages_field: Chat: the field holding a record's messages; default `"messages"`.
        chat_template: Chat: `"auto"` (default: the `hf:` tokenizer's own template, from its
            `tokenizer_config.json`) or `"chatml"` (shipped; works with every tokenizer).
        train_on: Chat: where `loss_mask` is 1: `"assistant"` (default: every assistant
            turn's content and end-of-turn marker), `"all"` or `"last"` (the last assistant
            turn only).
        bos: Add the tokenizer's beginning-of-sequence token at the start of each document
            (unless the document already starts with it).
        transform: A function `record -> record | None` run on each input record before
            tokenizing (None drops it, counted as `filtered`), or its import path
            `"package.module:function"` (importable on the workers).
        transform_id: A name and version of the transform (e.g. `"langfilter-v1"`): part of
            the job's identity; required with `transform`.
        meta_fields: Stream with metadata: the record fields that annotate one span over each
            record's tokens.
        spans_field: Stream with metadata: the field holding character-offset annotations
            `[{"start": 0, "end": 120, ...}]`.
        meta_format: Stream with metadata: `"json"` (default) or `"msgpack"` annotations.
        text_field: The field holding a record's text (JSON Lines, Parquet); default `"text"`.
        text_per_line: Plain text: one document per line (default: one per file).
        tokenizer: `"bytes"` (default), `"hf:PATH/tokenizer.json"`, `"tiktoken:NAME"`,
            `"NAME[:ARGUMENT]"` of a tokenizer a package registered
            (`guideloom.workers.tokenizer.TOKENIZERS`), or a tokenizer object (the
            `guideloom.types.Tokenizer` protocol; picklable, as Ray sends it to every task).
        eos_token: `hf:` tokenizers: the end-of-document token's text (default: a usual one
            such as `</s>`).
        append_eos: Append an end-of-document token to each document; default True for
            the stream layouts, False for `"documents"`.
        layout: `"stream"` (a `StreamStorage`, default), `"documents"` (a `DocumentStorage`,
            one record per input document) or `"stream_with_meta"` (a
            `StreamWithMetaStorage`; needs `meta_fields` and/or `spans_field`): the spellings of
            `guideloom.types.LAYOUTS`; `"document"` and `"stream-with-meta"` (the command line's)
            are accepted as well.
        doc_index: Streams: add a `uint64` `doc_index` field, unique per document.
        format: Documents: `"json"` (default), `"msgpack"` or `"pickle"`.
        id_field: An input field that names each record (e.g. `"id"`): kept with the file and
            line (or row) each record came from, which `guideloom trace` shows.
        passthrough: Documents: input fields copied into each record beside `tokens`.
        passthrough_defaults: Documents: `{field: value}` for passthrough fields a record may
            lack (without one, a record lacking the field is a bad record).
        shard_size: Bytes per shard (default 64 MiB).
        part_size: Input bytes per part, one Ray task each (default 32 MiB).
        on_bad_record: `"fail"` (default: the first bad record stops the job) or `"skip"`
            (skip and count them).
        rejects: A file (path or fsspec URL) that lists every rejected record as JSON Lines
            (file, line or row, byte offset, reason, message), under either policy
            (`guideloom.workers.rejects`).
        decontaminate: Eval sets to decontaminate against: paths, globs, folders or URLs of
            JSON Lines or Parquet files (one eval item per record), each a string (its
            `decontaminate_field` is read) or `{"path": ..., "field": ...}`. A document sharing
            `decontaminate_ngram` consecutive words with an item is dropped
            (`guideloom.workers.decontam`).
        decontaminate_field: The eval records' field holding the text; default `"text"`.
        decontaminate_ngram: Words per n-gram (lowercased, punctuation stripped); default 13.
        overwrite: Replace whatever dataset the output holds.
        append: Add the records after the output dataset's (a new snapshot; the existing
            shard files are not touched). A re-run of the same append job lands once.
        dedup: `"exact"`: drop each document whose text equals an earlier one's (ingestion
            order), and, appending, one the dataset already holds (see docs/clean-data.md).
        dedup_normalize: With `dedup`: compare texts after Unicode NFC, collapsing whitespace
            and case folding.
        allow_other_tokenizer: Append even when the dataset records another tokenizer.
        commit_every: Commit a snapshot each time the next this many parts (an int, or a
            string of digits) or this much input (a size such as `"2GiB"`, counted in input
            bytes as `part_size` is) are complete, in part order; the last snapshot has the
            shard table of a one-shot ingestion. Default: one commit at the end.
        ray_address: The Ray cluster to run on; default `$RAY_ADDRESS`, else a local Ray.
        runner: Where the parts run: ``ray`` (the cluster named, else a local Ray this job
            starts), ``inline`` (this process, one part after another, the tokenizer on every
            core), ``auto`` (the default): inline when no cluster is named, Ray is not already
            running in this process, and the job is small (`guideloom.workers.driver.INLINE_MAX_BYTES`
            of planned input) or has one worker; else Ray. The output bytes are the same.
        num_workers: Parts in flight; default twice the cluster's CPUs.
        max_retries: Retries of a part whose worker died (default 3).
        progress: `"auto"`, `"rich"`, `"plain"` (log lines on stderr) or `"none"`.
        storage_options: fsspec options for the output; never stored in the manifest.
        input_storage_options: fsspec options for `s3://` (and other remote) inputs and an
            `hf:` tokenizer file.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    inputs: list[str] = Field(min_length=1, description="paths, globs or fsspec URLs")
    output: str = Field(min_length=1, description="dataset URL or local directory")
    input_format: str = Field(default="auto", description="auto, or an input reader's name")
    text_field: str = "text"
    text_per_line: bool = Field(default=False, description="plain text: one document per line")
    tokenizer: str | Tokenizer = Field(default="bytes", description="a spec, or a tokenizer object")
    eos_token: str | None = Field(default=None, description="hf: name of the end-of-document token")
    append_eos: bool | None = Field(default=None, description="default: True for stream, False for document")
    layout: Layout = STREAM
    doc_index: bool = Field(default=False, description="stream: add a per-token doc_index field")
    format: Literal["json", "msgpack", "pickle"] = "json"
    passthrough: list[str] = Field(default_factory=list, description="document: fields to copy")
    passthrough_defaults: dict[str, Any] = Field(
        default_factory=dict, description="document: a passthrough field's value where a record lacks it"
    )
    messages_field: str = Field(default="messages", min_length=1, description="chat: the messages field")
    chat_template: Literal["auto", "chatml"] = "auto"
    train_on: Literal["assistant", "all", "last"] = "assistant"
    bos: bool = Field(default=False, description="add the beginning-of-sequence token")
    transform: str | Callable[..., Any] | None = Field(default=None, description="record -> record | None")
    id_field: str | None = Field(default=None, description="an input field naming each record (for trace)")
    transform_id: str | None = Field(
        default=None, min_length=1, description="the transform's name and version"
    )
    meta_fields: list[str] = Field(default_factory=list, description="stream-with-meta: record fields")
    spans_field: str | None = Field(default=None, min_length=1, description="stream-with-meta: spans field")
    meta_format: Literal["json", "msgpack"] = "json"
    shard_size: int = Field(default=64 * MiB, gt=0)
    part_size: int = Field(default=32 * MiB, gt=0)
    on_bad_record: Literal["fail", "skip"] = "fail"
    rejects: str | None = Field(default=None, min_length=1, description="a file listing rejected records")
    decontaminate: list[str | dict[str, str]] = Field(
        default_factory=list, description="eval files: paths, or {path, field}"
    )
    decontaminate_field: str = Field(default="text", min_length=1, description="the eval records' text field")
    decontaminate_ngram: int = Field(default=13, gt=0, description="words per n-gram")
    # The eval set's index, attached by the driver for the tasks (guideloom.workers.decontam).
    _eval_index: Any = PrivateAttr(default=None)
    overwrite: bool = False
    append: bool = False
    dedup: Literal["exact"] | None = Field(default=None, description="drop exact duplicate documents")
    dedup_normalize: bool = Field(default=False, description="dedup: NFC, whitespace collapsed, casefold")
    allow_other_tokenizer: bool = Field(default=False, description="append with another tokenizer")
    # When to commit: not part of the job's identity (the final snapshot is the same).
    commit_every: int | str | None = Field(default=None, description="parts (N) or a size (2GiB)")
    # Where and how to run: not part of the job's identity.
    ray_address: str | None = None
    runner: Literal["auto", "ray", "inline"] = "auto"
    num_workers: int | None = Field(default=None, gt=0, description="concurrent tasks; default: cluster CPUs")
    max_retries: int = Field(default=3, ge=0)
    progress: Literal["auto", "rich", "plain", "none"] = "auto"
    storage_options: dict[str, Any] = Field(default_factory=dict, repr=False)
    input_storage_options: dict[str, Any] = Field(default_factory=dict, repr=False)

    @field_validator("decontaminate", mode="before")
    @classmethod
    def _eval_sources(cls, value: Any) -> Any:
        """One path, or a list of paths and ``{"path": ..., "field": ...}`` mappings."""
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        for entry in value if isinstance(value, list) else []:
            if isinstance(entry, dict) and (set(entry) - {"path", "field"} or "path" not in entry):
                raise ValueError(f"a decontaminate entry {entry!r} takes the keys path (required) and field")
        return value

    @field_validator("layout", mode="before")
    @classmethod
    def _one_spelling(cls, value: Any) -> Any:
        """``document`` and ``stream-with-meta`` (the command line's and job files' spellings)
        are `guideloom.types.LAYOUT_ALIASES`: stored as the one spelling of `LAYOUTS`."""
        return layout_named(value) if isinstance(value, str) else value

    @field_validator("shard_size", "part_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        """A size as the flags take it (``"2MiB"``, ``"1GB"``, ``"4096"``) or a number of bytes."""
        if not isinstance(value, str):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
        if not m or m.group(2).lower() not in SIZE_UNITS:
            raise ValueError(f"{value!r} is not a size: use e.g. 1048576, 64MiB or 1GB")
        return int(m.group(1)) * SIZE_UNITS[m.group(2).lower()]

    @field_validator("commit_every", mode="before")
    @classmethod
    def _commit_every(cls, value: Any) -> Any:
        """A positive number of parts (an int, or digits) or a size with a unit (``"2GiB"``)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"commit_every takes a number of parts or a size such as 2GiB, got {value!r}")
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, int):
            if value <= 0:
                raise ValueError(f"commit_every must be a positive number of parts, got {value}")
            return value
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]+)\s*", value)
        if not m or m.group(2).lower() not in SIZE_UNITS or int(m.group(1)) <= 0:
            raise ValueError(
                f"commit_every {value!r} is neither a number of parts nor a size: use e.g. 8 "
                "(parts) or 2GiB (input bytes)"
            )
        return f"{int(m.group(1))}{m.group(2)}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled as the options that differ from their defaults (Ray sends the config to every
        part task: pydantic's own pickling names all 45 fields, about 900 bytes for a job of two
        options), rebuilt without validating again (the driver validated it) and with the
        private attributes (the eval index) kept."""
        changed = {
            name: value
            for name, value in self.__dict__.items()
            if name not in _DEFAULTS or not _same(value, _DEFAULTS[name])
        }
        private = {k: v for k, v in (self.__pydantic_private__ or {}).items() if v is not None}
        return (_rebuild, (changed, private))

    @property
    def commit_rule(self) -> tuple[str, int] | None:
        """``commit_every`` as ``("parts", n)`` or ``("bytes", n)``; None: commit once, at the end."""
        if self.commit_every is None:
            return None
        if isinstance(self.commit_every, int):
            return ("parts", self.commit_every)
        m = re.fullmatch(r"(\d+)([a-zA-Z]+)", self.commit_every)
        assert m is not None  # checked by the validator
        return ("bytes", int(m.group(1)) * SIZE_UNITS[m.group(2).lower()])

    @field_validator("tokenizer", mode="before")
    @classmethod
    def _tokenizer_spec(cls, value: Any) -> Any:
        if not isinstance(value, str):
            try:
                return check_tokenizer(value, "the tokenizer")
            except IngestError as err:
                raise ValueError(str(err)) from None
        try:
            return check_spec(value)
        except PluginError as err:
            raise ValueError(str(err)) from None

    @field_validator("transform", mode="before")
    @classmethod
    def _transform(cls, value: Any) -> Any:
        if value is None or callable(value):
            return value
        if not isinstance(value, str) or not _IMPORT_PATH.fullmatch(value):
            raise ValueError(
                f"transform {value!r} is neither a function nor an import path: give "
                "'package.module:function' (importable on the workers)"
            )
        return value

    @field_validator("input_format")
    @classmethod
    def _input_format(cls, value: str) -> str:
        if value in ("auto", "chat") or value in INPUT_READERS:
            return value
        known = ", ".join(["auto", "chat", *INPUT_READERS.names()])
        raise ValueError(
            f"unknown input format {value!r}; known: {known}. A package adds one with an entry "
            f"point in the group {INPUT_READERS.group!r} (or "
            "guideloom.workers.readers.INPUT_READERS.register)"
        )

    @model_validator(mode="after")
    def _layout_options(self) -> IngestConfig:
        if self.layout == STREAM and self.passthrough:
            raise ValueError("passthrough fields need --layout document (a stream stores tokens only)")
        unknown = [name for name in self.passthrough_defaults if name not in self.passthrough]
        if unknown:
            raise ValueError(
                f"--passthrough-default {unknown[0]}=... gives a default to a field that is not "
                f"kept: add --passthrough {unknown[0]}"
            )
        if self.layout == DOCUMENTS and self.doc_index:
            raise ValueError("--doc-index needs --layout stream (a document is its own index)")
        if self.layout == STREAM and self.format != "json":
            raise ValueError("--format chooses a document format: it needs --layout document")
        if self.eos_token is not None and not self.tokenizer_spec.startswith("hf:"):
            raise ValueError("--eos-token applies to hf: tokenizers only")
        if self.chat and self.layout != STREAM:
            raise ValueError(
                "--input-format chat writes a stream (tokens and loss_mask): use --layout stream"
            )
        if self.layout == STREAM_WITH_META:
            if not self.meta_fields and self.spans_field is None:
                raise ValueError(
                    "--layout stream-with-meta needs annotations: --meta-field FIELD (one span "
                    "per record, annotated with those fields) and/or --spans-field FIELD "
                    "(character-offset spans in each record)"
                )
        elif self.meta_fields or self.spans_field is not None or self.meta_format != "json":
            raise ValueError("--meta-field, --spans-field and --meta-format need --layout stream-with-meta")
        if self.transform is not None and self.transform_id is None:
            raise ValueError(
                "a transform needs transform_id, a name and version you choose (e.g. "
                "transform_id='langfilter-v1'): it is part of the job's identity, so change it "
                "whenever the transform's output changes"
            )
        if self.transform is None and self.transform_id is not None:
            raise ValueError("transform_id names a transform: give the transform too")
        if self.dedup_normalize and self.dedup is None:
            raise ValueError("dedup_normalize says how --dedup compares texts: pass --dedup exact too")
        if self.append and self.overwrite:
            raise ValueError("--append adds to the dataset and --overwrite replaces it: pass one of them")
        return self

    @property
    def chat(self) -> bool:
        """Whether records are conversations (``input_format: chat``)."""
        return self.input_format == "chat"

    @property
    def reader_format(self) -> str:
        """The input reader kind to use: chat records come from JSONL or Parquet (``auto``)."""
        return "auto" if self.chat else self.input_format

    @property
    def tokenizer_spec(self) -> str:
        """The tokenizer's spec: the string given, or a tokenizer object's ``spec``."""
        return self.tokenizer if isinstance(self.tokenizer, str) else str(self.tokenizer.spec)

    @property
    def eos(self) -> bool:
        """Whether an end-of-document token follows each document's tokens (`append_eos`, or
        by default True for streams (with metadata too) and False for documents)."""
        return self.append_eos if self.append_eos is not None else self.layout != DOCUMENTS

    def identity(self) -> dict[str, Any]:
        """The options that decide the bytes written (recorded in the manifest metadata).

        Returns:
            The fields that change the output (formats, tokenizer, layout, sizes, bad-record
            policy) plus the effective `append_eos`; not where or how fast the job runs.
        """
        keep = {
            "input_format",
            "text_field",
            "text_per_line",
            "tokenizer",
            "eos_token",
            "layout",
            "doc_index",
            "format",
            "passthrough",
            "shard_size",
            "part_size",
            "on_bad_record",
        }
        options = self.model_dump(include=keep)
        # Recorded as ingestion always spelled it, so that the plan digest of a job (and so its
        # resume and its re-run landing once) is what it was before layouts had one spelling.
        options["layout"] = _RECORDED_LAYOUT[self.layout]
        # A tokenizer object is named by its spec here; the plan digest and the manifest also
        # record its describe() (guideloom.workers.results).
        options["tokenizer"] = self.tokenizer_spec
        options["append_eos"] = self.eos
        # Options added later are recorded only when set, so that the identity (and so the plan
        # digest) of a job that does not use them is what it always was: it still resumes.
        newer: dict[str, Any] = {}
        if self.chat:
            newer.update(
                messages_field=self.messages_field, chat_template=self.chat_template, train_on=self.train_on
            )
        if self.bos:
            newer["bos"] = True
        if self.passthrough_defaults:
            newer["passthrough_defaults"] = dict(sorted(self.passthrough_defaults.items()))
        if self.transform is not None:
            newer["transform_id"] = self.transform_id
        if self.layout == STREAM_WITH_META:
            newer.update(
                meta_fields=list(self.meta_fields), spans_field=self.spans_field, meta_format=self.meta_format
            )
        options.update(newer)
        if self.decontaminate:  # the eval set's content hash is in the plan digest too
            from guideloom.io import redact_url

            options["decontaminate"] = {
                "eval": [
                    redact_url(e) if isinstance(e, str) else {**e, "path": redact_url(e["path"])}
                    for e in self.decontaminate
                ],
                "field": self.decontaminate_field,
                "ngram": self.decontaminate_ngram,
            }
        if self.dedup is not None:
            options["dedup"] = self.dedup
            options["dedup_normalize"] = self.dedup_normalize
        if self.append:  # an append is another job than a write of the same input
            options["append"] = True
        return options


def _default(field: Any) -> Any:
    return field.default_factory() if field.default_factory is not None else field.default


# Each option's default value (a required option has none: always pickled).
_DEFAULTS: dict[str, Any] = {
    name: _default(field) for name, field in IngestConfig.model_fields.items() if not field.is_required()
}


def _same(value: Any, default: Any) -> bool:
    """``value`` is its option's default: the same type and equal (True is not 1)."""
    return type(value) is type(default) and bool(value == default)


def _rebuild(changed: dict[str, Any], private: dict[str, Any]) -> IngestConfig:
    """The config `IngestConfig.__reduce__` pickled (the other options take their defaults)."""
    config = IngestConfig.model_construct(**changed)
    for name, value in private.items():
        setattr(config, name, value)
    return config


def read_job_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML job file holds (not validated yet)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise IngestError(f"job file {path} does not exist") from err
    except yaml.YAMLError as err:
        raise IngestError(f"job file {path} is not valid YAML: {err}") from err
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise IngestError(f"job file {path} must hold a mapping of option names to values")
    return data


def load_job_file(path: str | Path, overrides: dict[str, Any] | None = None) -> IngestConfig:
    """Read a YAML job file, apply ``overrides`` (flags given on the command line) and validate.

    Args:
        path: The job file (YAML; the keys are `IngestConfig`'s fields).
        overrides: Keys that replace the file's (what flags given beside ``--config`` set).

    Returns:
        The validated `IngestConfig`.

    Raises:
        IngestError: The file cannot be read, or a key or value is invalid (each named).
    """
    data = read_job_file(path)
    data.update(overrides or {})
    return validate_config(data, source=f"job file {path}")


def _suggestion(name: str) -> str:
    close = difflib.get_close_matches(name, list(IngestConfig.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def validate_config(data: dict[str, Any], *, source: str = "options") -> IngestConfig:
    """Build an `IngestConfig`, turning pydantic's errors into one readable IngestError.

    An unknown key names the closest known one (``text_feild`` -> did you mean ``text_field``).

    Args:
        data: The options, as `ingest_dataset` keyword arguments or a job file's keys.
        source: What the options came from, for the message (``"job file jobs/books.yaml"``).

    Returns:
        The validated `IngestConfig`.

    Raises:
        IngestError: Every invalid key or value, one line each.
    """
    try:
        return IngestConfig.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            where = ".".join(str(p) for p in e["loc"]) or "job"
            if e["type"] == "extra_forbidden" and len(e["loc"]) == 1:
                key = str(e["loc"][0])
                lines.append(f"  {key}: unknown option{_suggestion(key)}")
            else:
                lines.append(f"  {where}: {e['msg']}")
        raise IngestError(f"invalid ingestion {source}:\n" + "\n".join(lines)) from None
