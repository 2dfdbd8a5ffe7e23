"""Paths and helpers shared by the documentation tests (fixtures are in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLES = REPO / "examples"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a docs script: the repository importable even without an install."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("NO_MKDOCS_2_WARNING", "1")  # Material's banner about MkDocs 2, on every build
    env.update(extra)
    return env


def build_site(site_dir: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` into site_dir, the same command as `make docs`."""
    mkdocs = [sys.executable, "-m", "mkdocs"]
    return subprocess.run(
        [
            *mkdocs,
            "build",
            "--strict",
            "--config-file",
            str(config),
            "--site-dir",
            str(site_dir),
        ],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
