"""Every Python code block in docs/ is either run here or says why not.

Mark a block with an HTML comment on the line right above its fence:

    <!-- runnable -->              run it; the runnable blocks of one page run in order, as one
                                   script, in a fresh temporary directory
    <!-- runnable: gcs -->, <!-- runnable: azure -->  the same against the session's GCS
                                   emulator (STORAGE_EMULATOR_HOST) or azurite
                                   (AZURE_STORAGE_CONNECTION_STRING), GUIDELOOM_BUCKET a fresh one
    <!-- runnable: s3 -->          the same, against the test session's S3 endpoint, with the
                                   AWS SDK's AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
                                   AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION set (as
                                   docs/local-s3.md tells users to) and GUIDELOOM_BUCKET
                                   naming a fresh, existing bucket
    <!-- not-runnable: REASON -->  shown only (needs a cluster, real credentials, ...)

A block whose body is a snippet include (`--8<-- "examples/x.py"`) is the script itself, which
test_examples.py runs. Unmarked Python blocks fail the test, so nothing drifts silently.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docs_helpers import DOCS, subprocess_env

MARK = re.compile(r"^<!--\s*(runnable(?::\s*(?P<kind>[\w-]+))?|not-runnable:\s*\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    marker: str | None  # "runnable", "runnable:s3", "not-runnable" or None
    code: str


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m["fence"], i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        marker = None
        mark = MARK.match(lines[start - 1].strip()) if start > 0 else None
        if mark:
            if mark.group(1).startswith("not-runnable"):
                marker = "not-runnable"
            else:
                marker = "runnable" + (f":{mark['kind']}" if mark["kind"] else "")
        found.append(Block(page, start + 1, m["lang"].lower(), marker, "\n".join(body)))
    return found


PAGES = sorted(DOCS.rglob("*.md"))
ALL = [b for page in PAGES for b in blocks(page)]


def _script(page_blocks: list[Block]) -> str:
    parts = []
    for b in page_blocks:
        parts.append(f"# --- {b.page.relative_to(DOCS)}, block at line {b.line} ---\n{b.code}\n")
    return "\n".join(parts)


def _runnable(kind: str) -> list[tuple[Path, list[Block]]]:
    out = []
    for page in PAGES:
        chosen = [b for b in ALL if b.page == page and b.marker == kind]
        if chosen:
            out.append((page, chosen))
    return out


def _run(page: Path, page_blocks: list[Block], cwd: Path, **env: str) -> None:
    script = cwd / "doc_blocks.py"
    script.write_text(_script(page_blocks), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, (
        f"runnable code in docs/{page.relative_to(DOCS)} failed (the script is the page's runnable "
        f"blocks in order; each starts with a '# ---' line naming the block):\n"
        f"{result.stdout}\n{result.stderr}"
    )


def test_every_python_block_is_marked() -> None:
    unmarked = [
        f"docs/{b.page.relative_to(DOCS)}:{b.line}"
        for b in ALL
        if b.lang in ("python", "py") and b.marker is None and "--8<--" not in b.code
    ]
    assert not unmarked, (
        "Python blocks without <!-- runnable --> or <!-- not-runnable: reason --> above the fence: "
        + ", ".join(unmarked)
    )


def test_markers_are_only_on_python_blocks() -> None:
    wrong = [
        f"docs/{b.page.relative_to(DOCS)}:{b.line}"
        for b in ALL
        if b.marker and b.marker.startswith("runnable") and b.lang not in ("python", "py")
    ]
    assert not wrong, f"runnable markers on non-Python blocks: {wrong}"


LOCAL = _runnable("runnable")


@pytest.mark.parametrize("page,page_blocks", LOCAL, ids=[str(p.relative_to(DOCS)) for p, _ in LOCAL])
def test_runnable_blocks(page: Path, page_blocks: list[Block], tmp_path: Path) -> None:
    _run(page, page_blocks, tmp_path)


S3 = _runnable("runnable:s3")


@pytest.mark.s3
@pytest.mark.parametrize("page,page_blocks", S3, ids=[str(p.relative_to(DOCS)) for p, _ in S3])
def test_runnable_s3_blocks(
    page: Path, page_blocks: list[Block], tmp_path: Path, s3_endpoint: object, s3_bucket: str
) -> None:
    _run(
        page,
        page_blocks,
        tmp_path,
        AWS_ENDPOINT_URL=s3_endpoint.url,  # type: ignore[attr-defined]
        AWS_ACCESS_KEY_ID=s3_endpoint.key,  # type: ignore[attr-defined]
        AWS_SECRET_ACCESS_KEY=s3_endpoint.secret,  # type: ignore[attr-defined]
        AWS_DEFAULT_REGION="us-east-1",
        GUIDELOOM_BUCKET=s3_bucket,
    )


GCS = _runnable("runnable:gcs")
AZURE = _runnable("runnable:azure")


@pytest.mark.gcs
@pytest.mark.parametrize("page,page_blocks", GCS, ids=[str(p.relative_to(DOCS)) for p, _ in GCS])
def test_runnable_gcs_blocks(
    page: Path, page_blocks: list[Block], tmp_path: Path, gcs_endpoint: Any, gs_bucket: str
) -> None:
    _run(page, page_blocks, tmp_path, **gcs_endpoint.env(), GUIDELOOM_BUCKET=gs_bucket)


@pytest.mark.azure
@pytest.mark.parametrize("page,page_blocks", AZURE, ids=[str(p.relative_to(DOCS)) for p, _ in AZURE])
def test_runnable_azure_blocks(
    page: Path, page_blocks: list[Block], tmp_path: Path, azure_endpoint: Any, az_container: str
) -> None:
    _run(page, page_blocks, tmp_path, **azure_endpoint.env(), GUIDELOOM_BUCKET=az_container)


# Pages allowed to write a fixed local path: none. Every runnable page must re-run cleanly.
_FIXED_PATHS_ALLOWED: set[str] = set()


def test_runnable_blocks_write_no_fixed_local_path() -> None:
    # A fixed relative path ("data/x") makes the second run of a page in the same folder fail with
    # DatasetExistsError: pages write under a temporary folder (or overwrite) instead. Caught: a
    # storage class or `Location` given a string literal that is not a URL, and an
    # `ingest_dataset(inputs, "path")` whose output is one.
    fixed = re.compile(
        r"(?:Storage|Location)\(\s*[\"'](?![a-z0-9]+://)"
        r"|ingest_dataset\(\s*\[[^\]]*\]\s*,\s*[\"'](?![a-z0-9]+://)"
    )
    offenders = [
        f"docs/{b.page.relative_to(DOCS)}:{b.line}"
        for b in ALL
        if b.marker == "runnable"
        and str(b.page.relative_to(DOCS)) not in _FIXED_PATHS_ALLOWED
        and fixed.search(b.code)
    ]
    assert not offenders, f"runnable blocks writing a fixed local path: {offenders}"
