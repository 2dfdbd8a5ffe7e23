"""The ingestion test hooks, run inside Ray workers through `guideloom.workers.hooks` (the one
testing seam): kill a worker in the middle of a part, slow parts or records down.

`hooks_env(**settings)` gives the environment variables that name this file and its settings;
set them where the driver runs (monkeypatch.setenv, a subprocess's env, a job's runtime_env).

Settings (all optional):
    crash_once    {"part": k, "marker": path}: the first attempt of part k dies like a killed
                  worker (``os._exit``, no cleanup) once its shards are written; the marker file
                  says it happened (and keeps the retry alive)
    part_delay_s  seconds each part sleeps before it starts
    doc_delay_s   seconds each part sleeps after every record it reads
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from guideloom.workers.hooks import HOOKS_ENV

SETTINGS_ENV = f"{HOOKS_ENV}_SETTINGS"


def hooks_env(**settings: Any) -> dict[str, str]:
    """``{GUIDELOOM_INGEST_HOOKS: this file, GUIDELOOM_INGEST_HOOKS_SETTINGS: JSON settings}``."""
    return {HOOKS_ENV: str(Path(__file__).resolve()), SETTINGS_ENV: json.dumps(settings)}


def _settings() -> dict[str, Any]:
    return json.loads(os.environ.get(SETTINGS_ENV, "{}"))


def part_started(part: int) -> None:
    delay = float(_settings().get("part_delay_s", 0))
    if delay:
        time.sleep(delay)


_DOC_DELAY: list[float] = []  # read once per process: this runs after every record


def record_read(part: int) -> None:
    if not _DOC_DELAY:
        _DOC_DELAY.append(float(_settings().get("doc_delay_s", 0)))
    if _DOC_DELAY[0]:
        time.sleep(_DOC_DELAY[0])


def part_written(part: int) -> None:
    crash = _settings().get("crash_once")
    if crash and crash["part"] == part and not os.path.exists(crash["marker"]):
        with open(crash["marker"], "w") as marker:
            marker.write(str(os.getpid()))
        os._exit(1)
