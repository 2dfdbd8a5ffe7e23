"""The figure of docs/mixing.md: how a mixture interleaves its sources (an SVG, checked in).

Drawn from the real schedule, `guideloom.loading.interleave.Interleave`, for the page's
worked example (web 0.6, code 0.3, books 0.1):

- the first positions of a mixture epoch, one cell each, coloured by the source drawn, and the
  same positions split into one row per source (every source at a steady stride);
- the same shares drawn at random by weight (a fixed seed), for contrast;
- how far web's count after every prefix is from ``0.6 * p``, for both.

Usage::

    python scripts/docs/mixture_figure.py           # rewrite docs/assets/mixture-interleave.svg
    python scripts/docs/mixture_figure.py --check   # exit 1 if the checked-in file is stale

tests/docs/test_mixture_figure.py runs the check, so the figure cannot drift from the code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(REPO))

from guideloom.loading.interleave import Interleave, integer_weights  # noqa: E402

OUTPUT = REPO / "docs" / "assets" / "mixture-interleave.svg"
NAMES = ("web", "code", "books")
WEIGHTS = (0.6, 0.3, 0.1)
COLOURS = ("#4e79a7", "#f28e2b", "#59a14f")
CELLS = 40  # positions shown as cells
PREFIXES = 400  # prefixes in the deviation chart
SEED = 7  # the random-by-weight contrast

CELL, GAP, LEFT, TOP = 14, 2, 118, 28
WIDTH = LEFT + CELLS * (CELL + GAP) + 16


def _text(
    x: float, y: float, s: str, *, size: int = 12, anchor: str = "start", weight: str = "normal"
) -> str:
    return (
        f'<text x="{x:g}" y="{y:g}" font-size="{size}" text-anchor="{anchor}" '
        f'font-weight="{weight}">{s}</text>'
    )


def _strip(y: float, sources: np.ndarray, label: str) -> list[str]:
    """One row of cells, each coloured by its source, with the source's letter."""
    out = [_text(LEFT - 8, y + CELL - 3, label, anchor="end")]
    for p, s in enumerate(sources.tolist()):
        x = LEFT + p * (CELL + GAP)
        out.append(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" rx="2" fill="{COLOURS[s]}"/>')
        out.append(
            f'<text x="{x + CELL / 2:g}" y="{y + CELL - 3:g}" font-size="9" text-anchor="middle" '
            f'fill="#ffffff">{"ABC"[s]}</text>'
        )
    return out


def _per_source(y: float, sources: np.ndarray) -> list[str]:
    """One row per source: a filled cell where that source draws, an outline elsewhere."""
    out = []
    for i, name in enumerate(NAMES):
        row = y + i * (CELL + GAP)
        out.append(_text(LEFT - 8, row + CELL - 3, f"{name} ({WEIGHTS[i]:g})", anchor="end"))
        for p, s in enumerate(sources.tolist()):
            x = LEFT + p * (CELL + GAP)
            fill = COLOURS[i] if s == i else "none"
            out.append(
                f'<rect x="{x}" y="{row}" width="{CELL}" height="{CELL}" rx="2" fill="{fill}" '
                f'stroke="{COLOURS[i]}" stroke-opacity="0.35"/>'
            )
    return out


def _deviation_chart(y: float, stride: np.ndarray, random: np.ndarray) -> list[str]:
    """``count_web(p) - 0.6 p`` for p = 0 .. PREFIXES, stride schedule against random draws."""
    height, span = 150.0, 12.0  # the vertical axis shows -span .. +span samples
    width = CELLS * (CELL + GAP) - GAP
    mid = y + height / 2

    def path(src: np.ndarray, colour: str, dash: str = "") -> str:
        counts = np.concatenate([[0], np.cumsum(src == 0)])
        dev = counts - WEIGHTS[0] * np.arange(len(counts))
        xs = LEFT + np.arange(len(counts)) * width / PREFIXES
        ys = mid - np.clip(dev, -span, span) * (height / 2) / span
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(xs.tolist(), ys.tolist()))
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        return f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"{extra}/>'

    out = [
        f'<rect x="{LEFT}" y="{y}" width="{width}" height="{height:g}" fill="#f6f6f6"/>',
        # the band of +-1 sample: where the stride schedule stays
        f'<rect x="{LEFT}" y="{mid - height / 2 / span:g}" width="{width}" height="{height / span:g}" '
        'fill="#4e79a7" fill-opacity="0.15"/>',
        f'<line x1="{LEFT}" y1="{mid:g}" x2="{LEFT + width}" y2="{mid:g}" stroke="#999999"/>',
    ]
    for v in (-span, -span / 2, span / 2, span):
        out.append(_text(LEFT - 8, mid - v * (height / 2) / span + 4, f"{v:+g}", size=10, anchor="end"))
    out.append(_text(LEFT - 8, mid + 4, "0", size=10, anchor="end"))
    out.append(path(random, "#b07aa1", "4 3"))
    out.append(path(stride, COLOURS[0]))
    out.append(_text(LEFT + width, y + height + 14, f"p = {PREFIXES}", size=10, anchor="end"))
    out.append(_text(LEFT, y + height + 14, "p = 0", size=10))
    return out


def render() -> str:
    """The SVG text (deterministic: the same code gives the same bytes)."""
    interleave = Interleave(integer_weights(WEIGHTS))
    stride, _ = interleave.sources(0, PREFIXES)
    rng = np.random.default_rng(SEED)
    random = rng.choice(len(WEIGHTS), size=PREFIXES, p=np.array(WEIGHTS) / sum(WEIGHTS))
    parts: list[str] = []
    y = TOP
    parts.append(_text(16, y - 10, "Stride schedule (guideloom.Mixture): positions 0 - 39", weight="bold"))
    parts += _strip(y, stride[:CELLS], "mixture")
    y += CELL + 8
    parts += _per_source(y, stride[:CELLS])
    y += 3 * (CELL + GAP) + 34
    parts.append(_text(16, y - 10, "Random by weight, for contrast: positions 0 - 39", weight="bold"))
    parts += _strip(y, random[:CELLS], "mixture")
    y += CELL + 8
    parts += _per_source(y, random[:CELLS])
    y += 3 * (CELL + GAP) + 34
    parts.append(
        _text(16, y - 10, f"web's count after p samples minus 0.6 p, for p up to {PREFIXES}", weight="bold")
    )
    chart = _deviation_chart(y, stride, random)
    parts += chart
    y += 150 + 26
    legend = [
        (COLOURS[0], "", "stride schedule: always within one sample (shaded band)"),
        ("#b07aa1", "4 3", "random by weight: wanders by about sqrt(w (1 - w) p)"),
    ]
    for k, (colour, dash, label) in enumerate(legend):
        ly = y + k * 16
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<line x1="{LEFT}" y1="{ly - 4}" x2="{LEFT + 24}" y2="{ly - 4}" stroke="{colour}" '
            f'stroke-width="1.5"{extra}/>'
        )
        parts.append(_text(LEFT + 30, ly, label, size=11))
    height = y + 2 * 16
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" role="img" '
        'aria-labelledby="mixture-figure-title">'
    )
    title = (
        '<title id="mixture-figure-title">How a mixture of web (0.6), code (0.3) and books (0.1) '
        "interleaves its sources, against drawing each position at random by weight</title>"
    )
    background = f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>'
    return "\n".join([head, title, background, *parts, "</svg>", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the checked-in SVG is stale")
    args = parser.parse_args(argv)
    svg = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != svg:
            print(f"{OUTPUT} is stale: run python scripts/docs/mixture_figure.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(svg, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
