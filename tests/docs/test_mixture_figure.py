"""The mixing page's figure is what scripts/docs/mixture_figure.py draws from the real schedule."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "docs" / "mixture_figure.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mixture_figure", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_figure_is_what_the_script_draws() -> None:
    figure = _script()
    assert figure.OUTPUT.read_text(encoding="utf-8") == figure.render(), (
        "docs/assets/mixture-interleave.svg is stale: run python scripts/docs/mixture_figure.py"
    )
    assert figure.main(["--check"]) == 0


def test_the_figure_shows_the_interleave_of_the_worked_example() -> None:
    from guideloom.loading.interleave import Interleave, integer_weights

    figure = _script()
    svg = figure.render()
    # the first strip's letters are the schedule's first positions (as `guideloom mix` prints)
    letters = re.findall(r'fill="#ffffff">([ABC])</text>', svg)[: figure.CELLS]
    src, _ = Interleave(integer_weights(figure.WEIGHTS)).sources(0, figure.CELLS)
    assert "".join(letters) == "".join("ABC"[int(s)] for s in src)
    page = (REPO / "docs" / "mixing.md").read_text(encoding="utf-8")
    assert "assets/mixture-interleave.svg" in page
    assert np.bincount(src, minlength=3).tolist() == [24, 12, 4]
