"""Part planning is deterministic, splits big plain files and packs small ones."""

from __future__ import annotations

from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import InputFile, Segment


def _files() -> list[InputFile]:
    return [
        InputFile("a.jsonl", 250, "jsonl", None),
        InputFile("b.jsonl.gz", 250, "jsonl", "gzip"),
        InputFile("c.jsonl", 10, "jsonl", None),
        InputFile("d.jsonl", 20, "jsonl", None),
        InputFile("e.txt", 500, "text", None),
        InputFile("f.jsonl", 0, "jsonl", None),
    ]


def test_big_plain_files_split_compressed_and_whole_text_do_not():
    plan = plan_parts(_files(), part_size=100, text_per_line=False)
    assert plan.parts[:3] == (
        (Segment(0, 0, 100),),
        (Segment(0, 100, 200),),
        (Segment(0, 200, 250),),
    )
    assert plan.parts[3] == (Segment(1, 0, 250, whole=True),)
    # small files share a part; the whole-document text file is one segment
    assert plan.parts[4] == (Segment(2, 0, 10, whole=True), Segment(3, 0, 20, whole=True))
    assert plan.parts[5:] == ((Segment(4, 0, 500, whole=True),), (Segment(5, 0, 0, whole=True),))
    assert plan.part_bytes == (100, 100, 50, 250, 30, 500, 0)


def test_text_per_line_files_split():
    plan = plan_parts(_files()[4:5], part_size=200, text_per_line=True)
    assert plan.parts == ((Segment(0, 0, 200),), (Segment(0, 200, 400),), (Segment(0, 400, 500),))


def test_plan_and_digest_are_deterministic():
    a = plan_parts(_files(), part_size=100, text_per_line=False)
    b = plan_parts(list(_files()), part_size=100, text_per_line=False)
    assert a == b and a.digest({"x": 1}) == b.digest({"x": 1})
    assert a.digest({"x": 1}) != a.digest({"x": 2})
    assert a.digest({}) != plan_parts(_files(), part_size=99, text_per_line=False).digest({})
