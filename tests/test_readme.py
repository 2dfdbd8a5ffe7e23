"""The README's commands and its Python example work as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    first_block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert first_block is not None and README.index("```bash") < 200
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo: venv", makefile, re.M) and re.search(r"^test: venv", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_readme_python_example_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", README, re.S)
    assert code is not None
    script = code.group(1).replace('"/tmp/corpus"', repr(str(tmp_path / "corpus")))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "tensor(" in out.stdout
