"""Every rejected record named (``rejects=``), in ``skip`` and ``fail`` modes, locally and on
S3; decontamination end to end (exactly the planted leaks dropped, each named with its eval item
and n-gram); the counts of everything dropped in the metadata, the summary and ``guideloom log``."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from guideloom.errors import DatasetExistsError, IngestError
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.rejects import PIECES_SUFFIX
from guideloom.workers.results import METADATA_KEY, summary

pytestmark = pytest.mark.ray

FILLER = "a good document that pads the file so that it is cut into several parts " * 3


def _faulty_lines() -> list[tuple[bytes, str | None]]:
    """The input's lines and, for each planted fault, its reason (one of each kind)."""
    faults = [
        (b'{"id": 1, "text": "\xff\xfe not UTF-8"}', "invalid_utf8"),
        (b'{"id": 3, "text": "unterminated', "malformed_json"),
        (b"[1, 2, 3]", "not_object"),
        (b'{"id": 7, "body": "no text field"}', "missing_field"),
        (b'{"id": 9, "text": 42}', "not_string"),
        (b'{"id": 11, "text": "\\ud800 lone"}', "lone_surrogate"),
    ]
    lines: list[tuple[bytes, str | None]] = []
    for k, fault in enumerate(faults):
        lines.append((json.dumps({"id": 2 * k, "text": f"{k} {FILLER}"}).encode(), None))
        lines.append(fault)
    lines.append((json.dumps({"id": 99, "text": FILLER}).encode(), None))
    return lines


def _expected(url: str) -> list[dict]:
    out, offset = [], 0
    for n, (line, reason) in enumerate(_faulty_lines(), start=1):
        if reason is not None:
            out.append({"file": url, "line": n, "offset": offset, "reason": reason})
        offset += len(line) + 1
    return out


def _data() -> bytes:
    return b"".join(line + b"\n" for line, _ in _faulty_lines())


def _listed(fs, path: str) -> list[dict]:
    return [json.loads(line) for line in fs.cat_file(path).decode().splitlines()]


def _where(store: str, tmp_path: Path, s3_bucket: str, s3_options: dict) -> tuple[str, dict]:
    if store == "local":
        return str(tmp_path), {}
    return f"s3://{s3_bucket}", dict(s3_options)


@pytest.mark.parametrize("store", ["local", "s3"])
def test_skip_lists_every_planted_fault_in_order(ray_local, store, tmp_path, s3_bucket, s3_options):
    root, options = _where(store, tmp_path, s3_bucket, s3_options)
    fs, _ = fsspec.core.url_to_fs(root, **options)
    src = f"{root}/in/faults.jsonl"
    if store == "local":
        (tmp_path / "in").mkdir()
    fs.pipe_file(src, _data())
    rejects = f"{root}/reports/rejects.jsonl"
    result = ingest_dataset(
        [src], f"{root}/ds", on_bad_record="skip", rejects=rejects, part_size=700,
        storage_options=options, input_storage_options=options,
    )  # fmt: skip
    assert result.parts >= 3  # faults in segments that start mid-file: lines from offsets
    listed = _listed(fs, rejects)
    assert [{k: e[k] for k in ("file", "line", "offset", "reason")} for e in listed] == _expected(src)
    assert all(e["message"] for e in listed) and "malformed JSON" in listed[1]["message"]
    assert not fs.exists(rejects + PIECES_SUFFIX)
    meta = result.manifest.metadata[METADATA_KEY]
    reasons = {e["reason"]: 1 for e in _expected(src)}
    assert meta["dropped"] == {src: dict(sorted(reasons.items()))} and meta["rejects"] == rejects
    assert result.documents == 7 and result.bad_records_total == 6
    text = summary(result.manifest)
    assert "dropped: 6 records (1 invalid_utf8, 1 lone_surrogate, 1 malformed_json," in text
    assert f"rejected records (6) listed in {rejects}" in text


@pytest.mark.parametrize("store", ["local", "s3"])
def test_fail_stops_at_the_first_and_lists_it(ray_local, store, tmp_path, s3_bucket, s3_options):
    root, options = _where(store, tmp_path, s3_bucket, s3_options)
    fs, _ = fsspec.core.url_to_fs(root, **options)
    src = tmp_path / "faults.jsonl"
    src.write_bytes(_data())
    rejects = f"{root}/fail-rejects.jsonl"
    with pytest.raises(IngestError) as err:
        ingest_dataset(
            [str(src)],
            f"{root}/ds-fail",
            rejects=rejects,
            part_size=700,
            num_workers=1,
            storage_options=options,
        )
    first = _expected(str(src))[0]
    assert f"{src} line {first['line']}: invalid UTF-8" in str(err.value)
    assert f"It is listed in {rejects}; with the skip policy, {rejects} would list every" in str(err.value)
    (entry,) = _listed(fs, rejects)
    assert {k: entry[k] for k in ("file", "line", "offset", "reason")} == first
    assert not fs.exists(f"{root}/ds-fail/manifest.json")
    with pytest.raises(
        IngestError,
        match=r"pass --on-bad-record skip .*; add --rejects FILE \(rejects='FILE' in Python\) to list every one",
    ):
        ingest_dataset([str(src)], tmp_path / "ds-none", part_size=700, num_workers=1)


# -- decontamination -----------------------------------------------------------------------

EVAL = [
    "Natalia sold clips to forty eight of her friends in April and then she sold half as many clips in May",
    "Which gas do plants absorb from the atmosphere during photosynthesis to build sugars in their green leaves",
    "A train leaves the station at noon travelling north at sixty miles per hour toward a distant mountain town",
]
LEAKS = [
    "Story time. Natalia sold clips to forty eight of her friends in April and then she went home.",
    "Quiz: which gas do plants absorb from the\natmosphere during photosynthesis to build sugars?",
    "A TRAIN -- leaves the station, at NOON; travelling north (at sixty) miles per hour!",
]
NEAR_MISSES = [
    "Natalia sold clips to forty eight of her friends in April and",
    "Natalia sold clips to forty nine of her friends in April and then she sold half",
    "Natalia sold clips to eight forty of her friends in April and then she sold half",
    "which gas do plants absorb from the air and the atmosphere during photosynthesis to build sugars",
    "A train leaves the station at noon travelling north at sixty kilometres per hour toward the sea",
    "Which gas do plants absorb from the atmosphere during photosynthe sis to build sugars",
    "completely unrelated text about storage shards and windows " * 5,
]


def test_decontamination_drops_exactly_the_planted_leaks(ray_local, tmp_path):
    from typer.testing import CliRunner

    from guideloom import DocumentDataset
    from guideloom.cli import app

    (tmp_path / "evals").mkdir()
    eval_file = tmp_path / "evals" / "gsm.jsonl"
    eval_file.write_text("".join(json.dumps({"question": q, "answer": "42"}) + "\n" for q in EVAL))
    docs = [*NEAR_MISSES[:3], LEAKS[0], *NEAR_MISSES[3:5], LEAKS[1], NEAR_MISSES[5], LEAKS[2], NEAR_MISSES[6]]
    src = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"id": k, "text": t}) for k, t in enumerate(docs)]
    lines.insert(4, '{"id": "bad", "text": "not JSON')  # a bad record listed after a leak checked later
    src.write_text("".join(line + "\n" for line in lines))
    rejects = tmp_path / "rejects.jsonl"
    result = ingest_dataset(
        [str(src)], tmp_path / "ds", layout="document", passthrough=["id"], on_bad_record="skip",
        decontaminate=[str(tmp_path / "evals")], decontaminate_field="question", rejects=str(rejects),
    )  # fmt: skip
    kept = [d["id"] for d in DocumentDataset(result.storage)]
    assert kept == [k for k, t in enumerate(docs) if t not in LEAKS]
    listed = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(e["line"], e["reason"], e.get("eval", {}).get("line")) for e in listed] == [
        (4, "contaminated", 1),
        (5, "malformed_json", None),
        (8, "contaminated", 2),
        (10, "contaminated", 3),
    ]
    assert (
        listed[2]["ngram"]
        == "which gas do plants absorb from the atmosphere during photosynthesis to build sugars"
    )
    assert listed[0]["eval"] == {"file": str(eval_file), "line": 1, "field": "question"}
    assert "shares the 13-gram" in listed[3]["message"]
    meta = result.manifest.metadata[METADATA_KEY]
    assert meta["dropped"] == {str(src): {"contaminated": 3, "malformed_json": 1}}
    assert meta["dropped_total"] == {"contaminated": 3, "malformed_json": 1}
    assert meta["decontamination"]["items"] == 3 and meta["decontamination"]["ngram"] == 13
    assert "decontaminated against 3 eval items (13-grams): 3 documents dropped" in summary(result.manifest)
    log = CliRunner().invoke(app, ["log", str(tmp_path / "ds")])
    assert log.exit_code == 0 and "dropped: 3 contaminated, 1 malformed_json" in log.output
    inspected = CliRunner().invoke(app, ["inspect", "--json", str(tmp_path / "ds")])
    assert json.loads(inspected.output)["metadata"]["ingest"]["dropped"] == meta["dropped"]
    # another eval set is another job (its content is in the plan digest): refused without --overwrite
    eval_file.write_text(json.dumps({"question": EVAL[0]}) + "\n")
    job = dict(
        layout="document", passthrough=["id"], on_bad_record="skip",
        decontaminate=[str(tmp_path / "evals")], decontaminate_field="question",
    )  # fmt: skip
    with pytest.raises(DatasetExistsError, match="did not write"):
        ingest_dataset([str(src)], tmp_path / "ds", **job)
    # without rejects=, a decontaminated job lists what it dropped inside the dataset
    again = ingest_dataset([str(src)], tmp_path / "ds", overwrite=True, **job)
    assert again.rejects is not None and again.rejects.startswith(f"{tmp_path / 'ds'}/rejects/")
    assert again.dropped == {str(src): {"contaminated": 1, "malformed_json": 1}}
    listed = [json.loads(line) for line in Path(again.rejects).read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in listed] == [(4, "contaminated"), (5, "malformed_json")]
