"""Smoke run of `python -m benchmarks`: every row at a tiny size, once.

It checks that each row runs and reports positive figures in the JSON payload. It is not a timed
test: speed is measured by `make bench`, never asserted here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.cli import ROWS, main, run  # noqa: E402
from benchmarks.harness import Config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.s3, pytest.mark.ray]

TINY = dict(
    tokens=120_000,
    s3_tokens=60_000,
    documents=200,
    repeats=1,
    open_shards=30,
    ingest_tokens=100_000,
    memory_factor=4,
    quick=True,
)


# Rows that run ingestion on the session's local Ray (one Ray, in the xdist group "ray"); the
# others run on any test process, one test each, so a parallel suite spreads them out.
RAY_ROWS = ("ingest", "ingest-kinds")
OTHER_ROWS = tuple(r for r in ROWS if r not in RAY_ROWS)


def _run_row(tmp_path: Path, row: str, s3_endpoint: Any) -> dict[str, Any]:
    (tmp_path / "bench").mkdir()
    cfg = Config(workdir=tmp_path / "bench", **TINY)
    result = run(cfg, [row], s3_endpoint=s3_endpoint, log=lambda _m: None)
    result.pop("_rows")
    return json.loads(json.dumps(result, default=str))  # exactly what the JSON file holds


def _check_row(payload: dict[str, Any], row: str) -> None:
    assert payload["failures"] == {}
    rows = [r for r in payload["rows"] if r["row"] == row]
    assert rows, f"no {row} row in the results (failures: {payload['failures']})"
    for r in rows:
        for side in ("guideloom", "baseline"):
            stats = r[side]
            assert stats["samples"] and all(v > 0 for v in stats["samples"]), (r["case"], side, stats)
            assert stats["min"] <= stats["median"] <= stats["max"]
        assert r["ratio"] > 0
        assert r["unit"] and r["baseline_name"]


@pytest.mark.parametrize("row", OTHER_ROWS)
def test_row_runs_and_reports_positive_figures(tmp_path: Path, s3_endpoint: Any, row: str) -> None:
    _check_row(_run_row(tmp_path, row, s3_endpoint), row)


@pytest.mark.parametrize("row", RAY_ROWS)
def test_ingest_row_runs_on_the_local_ray(tmp_path: Path, s3_endpoint: Any, ray_local: Any, row: str) -> None:
    _check_row(_run_row(tmp_path, row, s3_endpoint), row)


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: Any) -> dict[str, Any]:
    """A run of one quick row, for what the payload says about the run itself."""
    return _run_row(tmp_path_factory.mktemp("payload"), "open", s3_endpoint)


def test_payload_describes_the_run(payload: dict[str, Any]) -> None:
    assert payload["machine"]["cores"] >= 1
    assert payload["s3_server"]["backend"] in ("rgw", "moto", "external")
    assert set(payload["row_seconds"]) == {"open"}
    assert payload["config"]["tokens"] == TINY["tokens"]


def test_command_line_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    code = main(
        [
            "--rows",
            "open",
            "--open-shards",
            "12",
            "--repeats",
            "1",
            "--quick",
            "--workdir",
            str(tmp_path / "w"),
            "--json",
            str(out),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert [r["row"] for r in data["rows"]] == ["open"]
    assert data["rows"][0]["guideloom"]["median"] > 0


def test_unknown_row_is_refused() -> None:
    with pytest.raises(SystemExit):
        main(["--rows", "nope"])
