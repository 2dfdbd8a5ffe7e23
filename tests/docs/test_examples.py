"""Every script in examples/ runs to completion (each checks its own results with asserts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from docs_helpers import EXAMPLES, subprocess_env

SCRIPTS = sorted(EXAMPLES.glob("*.py"))


def test_there_is_an_example_per_layout() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"documents.py", "stream.py", "stream_with_metadata.py", "padding_collator.py"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning:guideloom", str(script), str(tmp_path / "data")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout}\n{result.stderr}"
    assert result.stdout.strip(), f"{script.name} printed nothing"
