"""`guideloom ingest` from the folder that holds the checkout: Ray puts the driver's working
folder on its workers' import path, where a folder named ``guideloom`` (git's default name for
the clone) would be imported as an empty namespace package in place of the installed one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def test_ingest_runs_from_a_folder_that_holds_a_guideloom_folder(tmp_path):
    folder = tmp_path / "parent"
    (folder / "guideloom").mkdir(parents=True)
    # a clone's layout (no __init__.py at its root): its own package and workers/ folders
    for sub in ("guideloom", "workers"):
        (folder / "guideloom" / sub).mkdir()
        (folder / "guideloom" / sub / "__init__.py").write_text("")
    (folder / "guideloom" / "README.md").write_text("a clone\n")
    data = folder / "in.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " * 5}) + "\n" for i in range(20)))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env["RAY_AUTH_MODE"] = "disabled"
    run = subprocess.run(
        [str(BIN / "guideloom"), "ingest", "in.jsonl", "--output", "out", "--quiet", "--num-workers", "1", "--runner", "ray"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    inspected = subprocess.run(
        [str(BIN / "guideloom"), "inspect", str(folder / "out")], env=env, capture_output=True, text=True
    )
    assert inspected.returncode == 0, inspected.stderr
    assert "documents      20" in inspected.stdout, inspected.stdout
