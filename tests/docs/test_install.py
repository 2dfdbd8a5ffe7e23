"""The README's install claims hold: constraints.txt works on every Python version it names.

For each version X (from the README's `Python 3.A to 3.B`), the pins of constraints.txt that
apply on X.0 (environment markers evaluated for it) must

- each exist as a wheel installable on X: one `pip install --dry-run --no-deps --python-version
  X.0 --only-binary=:all:` of every pin against the package index (the Makefile's torch pin: `pip index versions`);
- satisfy every requirement pyproject.toml declares (all extras): checked offline.

The wheel check runs for the oldest version only (it downloads every wheel where the index has
no separate metadata). Whether the pins also agree with each other is what `make venv`'s
`pip check` shows on the interpreter it runs. A full check on each interpreter (minutes each):

    ~/.pyenv/versions/3.X.Y/bin/python -m pip install --dry-run --ignore-installed \
        --only-binary=:all: -c constraints.txt torch==2.13.0 -e ".[dev]"

Without access to the package index the wheel check skips.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from docs_helpers import REPO
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the test suite's own venv is 3.11

TORCH_PIN = "torch==2.13.0"  # the Makefile's TORCH_PIN
_OFFLINE = re.compile(r"Failed to establish a new connection|Temporary failure in name resolution|No route")


def readme_pythons() -> list[str]:
    """The versions the README names, from its `Python 3.A to 3.B` claim."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Python 3\.(\d+) to 3\.(\d+)", text)
    assert m, "README.md must state the supported Pythons as 'Python 3.A to 3.B'"
    return [f"3.{minor}" for minor in range(int(m[1]), int(m[2]) + 1)]


def requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith("guideloom")]
    return [*reqs, TORCH_PIN]


def canonical(requirement: str) -> str:
    return Requirement(requirement).name.lower().replace("_", "-")


def pins_for(version: str) -> list[str]:
    """constraints.txt's lines that apply on Python `version`, markers removed."""
    env = {"python_version": version, "python_full_version": f"{version}.0"}
    pins = []
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            pins.append(f"{req.name}{req.specifier}")
    return pins


def test_readme_claim_matches_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["requires-python"] == f">={readme_pythons()[0]}"


def test_each_version_gets_exactly_one_pin_per_package() -> None:
    for version in readme_pythons():
        names = [canonical(p) for p in pins_for(version)]
        doubled = sorted({n for n in names if names.count(n) > 1})
        assert not doubled, f"Python {version}: constraints.txt pins {doubled} twice"
    # The markers make a difference: 3.10 must not get numpy 2.4 (it has no 3.10 wheels).
    assert "numpy==2.4.6" not in pins_for("3.10")


def test_pins_satisfy_pyproject() -> None:
    for version in readme_pythons():
        pinned = {canonical(p): Requirement(p) for p in pins_for(version)}
        env = {"python_version": version, "python_full_version": f"{version}.0", "extra": ""}
        for line in requirements():
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            pin = pinned.get(canonical(line))
            if pin is None:
                continue
            (exact,) = (s.version for s in pin.specifier)
            assert req.specifier.contains(exact, prereleases=True), (
                f"Python {version}: constraints.txt pins {pin} but pyproject.toml asks for {req}"
            )


@pytest.mark.slow
def test_every_pin_has_a_wheel_on_the_oldest_python() -> None:
    # The oldest version is where releases drop support. The package mirror used here serves no
    # separate wheel metadata, so pip downloads every wheel (about 100 s for one version): one
    # version only. The newest versions are checked by hand in a release (see the module doc).
    version = readme_pythons()[0]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--no-deps",
        "--ignore-installed",
        "--quiet",
        "--disable-pip-version-check",
        "--python-version",
        f"{version}.0",
        "--only-binary=:all:",
        *[p for p in pins_for(version) if canonical(p) != "torch"],
    ]
    _pip_ok(cmd, f"a pin of constraints.txt has no wheel for Python {version}.0")
    # torch's wheels are GBs and pip would download one to read its metadata: list versions instead.
    torch = [sys.executable, "-m", "pip", "index", "versions", "torch", "--disable-pip-version-check"]
    listed = _pip_ok([*torch, "--python-version", f"{version}.0", "--only-binary=:all:"], "pip index")
    available = listed.split("Available versions:", 1)[-1].split("\n", 1)[0]
    assert TORCH_PIN.split("==")[1] in [v.strip() for v in available.split(",")], (
        f"{TORCH_PIN} (the Makefile's pin) has no wheel for Python {version}: {available}"
    )


def _pip_ok(cmd: list[str], what: str) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode and _OFFLINE.search(result.stderr):
        pytest.skip(f"the package index cannot be reached: {result.stderr.strip()[-300:]}")
    errors = "\n".join(line for line in result.stderr.splitlines() if "WARNING: Location" not in line)
    assert result.returncode == 0, f"{what}:\n{errors}"
    return result.stdout
