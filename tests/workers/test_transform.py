"""A user's transform before tokenizing: drop, modify, raise; identity by transform_id."""

from __future__ import annotations

import importlib

import pytest

from guideloom.errors import DatasetExistsError, IngestError
from guideloom.workers.config import validate_config
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.part import part_spec, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs

# Imported by path on the driver and on the Ray workers, whose import path holds the repository
# root (PYTHONPATH), so the module is named from there.
MODULE = "tests.workers.transforms_for_tests"


@pytest.fixture
def rows_file(write_jsonl, doc_rows):
    return write_jsonl("t.jsonl", doc_rows(10))


def test_drop_and_modify_by_path_and_by_function_resume_and_other_id(
    ray_local, rows_file, doc_rows, tmp_path
):
    out = str(tmp_path / "ds")
    job = {"transform": f"{MODULE}:shout_and_drop_odd", "transform_id": "shout-v1"}
    result = ingest_dataset([str(rows_file)], out, **job)
    kept = [r for r in doc_rows(10) if r["id"] % 2 == 0]
    assert result.documents == 5 and result.filtered == {str(rows_file): 5}
    expected = b"".join(r["text"].upper().encode() + b"\x00" for r in kept)
    from guideloom import StreamDataset

    tokens = StreamDataset(result.storage, sequence_length=result.tokens)[0]["tokens"].tolist()
    assert bytes(0 if t == 256 else t for t in tokens) == expected
    again = ingest_dataset([str(rows_file)], out, **job)  # the same job: nothing to do
    assert again.already_committed and again.manifest.shards == result.manifest.shards
    with pytest.raises(DatasetExistsError, match="did not write .* pass --overwrite"):
        ingest_dataset([str(rows_file)], out, **{**job, "transform_id": "shout-v2"})
    # a function object with the same id is the same job (the id is the identity)
    module = importlib.import_module(MODULE)
    same = ingest_dataset([str(rows_file)], out, transform=module.shout_and_drop_odd, transform_id="shout-v1")
    assert same.already_committed
    replaced = ingest_dataset(
        [str(rows_file)],
        out,
        transform=lambda r: {**r, "text": r["text"][:5]},
        transform_id="cut-v1",
        overwrite=True,
    )
    assert replaced.documents == 10 and replaced.filtered == {}


def _one_part(config):
    files = expand_inputs(config.inputs, config.reader_format, {})
    plan = plan_parts(files, part_size=10**6, text_per_line=False)
    return write_part(config, part_spec(plan, 0), "d" * 64)


@pytest.mark.parametrize(
    ("name", "reason", "detail"),
    [
        ("raise_on_three", "transform_error", "the transform raised ValueError: record 3 is cursed"),
        ("returns_a_list", "transform_result", "the transform returned list, not a dict (return the record"),
    ],
)
def test_a_transform_that_raises_or_returns_a_non_dict_is_a_bad_record(
    rows_file, tmp_path, name, reason, detail
):
    config = validate_config(
        {
            "inputs": [str(rows_file)],
            "output": str(tmp_path / "ds"),
            "transform": f"{MODULE}:{name}",
            "transform_id": "t1",
        }
    )
    with pytest.raises(IngestError) as err:
        _one_part(config)
    line = 4 if name == "raise_on_three" else 1
    assert f"{rows_file} line {line}: {detail}" in str(err.value)
    skip = config.model_copy(update={"on_bad_record": "skip", "output": str(tmp_path / "ds2")})
    result = _one_part(skip)
    assert result["bad_records"] == {str(rows_file): {reason: 1 if name == "raise_on_three" else 10}}


def test_transform_options_are_checked(rows_file, tmp_path):
    base = {"inputs": [str(rows_file)], "output": str(tmp_path / "ds")}
    with pytest.raises(IngestError, match="a transform needs transform_id"):
        validate_config({**base, "transform": f"{MODULE}:raise_on_three"})
    with pytest.raises(IngestError, match="'package.module:function'"):
        validate_config({**base, "transform": "not a path", "transform_id": "x"})
    with pytest.raises(IngestError, match="transform_id names a transform"):
        validate_config({**base, "transform_id": "x"})
    with pytest.raises(
        IngestError, match=r"no_such_module_here:f is not importable on this node .*--working-dir"
    ):
        ingest_dataset(
            [str(rows_file)], str(tmp_path / "ds"), transform="no_such_module_here:f", transform_id="x"
        )
    import threading

    lock = threading.Lock()
    with pytest.raises(IngestError, match="cannot be pickled .*give its import path"):
        ingest_dataset(
            [str(rows_file)], str(tmp_path / "ds"), transform=lambda r, lock=lock: r, transform_id="x"
        )


def test_a_transform_the_workers_cannot_import_is_named_with_the_fix(
    ray_local, rows_file, tmp_path, monkeypatch
):
    """Importable on the driver only (its folder is on the driver's sys.path, not the workers')."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    importlib.import_module("transforms_for_tests")  # the driver imports it
    with pytest.raises(IngestError) as err:
        ingest_dataset(
            [str(rows_file)],
            str(tmp_path / "ds"),
            transform="transforms_for_tests:raise_on_three",
            transform_id="x",
        )
    message = str(err.value)
    assert "the transform transforms_for_tests:raise_on_three is not importable on this node" in message
    assert "No module named 'transforms_for_tests'" in message and "ray job submit --working-dir ." in message
    assert not (tmp_path / "ds" / "manifest.json").exists()
    sys.modules.pop("transforms_for_tests", None)


def test_a_failed_job_leaves_the_committed_dataset_as_it_was(ray_local, rows_file, tmp_path):
    out = str(tmp_path / "ds")
    first = ingest_dataset([str(rows_file)], out)
    before = (tmp_path / "ds" / "manifest.json").read_bytes()
    with pytest.raises(IngestError, match="the transform raised ValueError"):
        ingest_dataset(
            [str(rows_file)], out, transform=f"{MODULE}:raise_on_three", transform_id="t", overwrite=True
        )
    assert (tmp_path / "ds" / "manifest.json").read_bytes() == before
    from guideloom import StreamDataset

    again = StreamDataset(first.storage, sequence_length=first.tokens)[0]["tokens"]
    assert int((again == 256).sum()) == 10
