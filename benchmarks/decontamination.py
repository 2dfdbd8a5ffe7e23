"""Row ``decontaminate``: an ingestion decontaminated against a 10,000-item eval set, against the
same ingestion without it.

One part, in process (``write_part``, no Ray), with a byte-level BPE tokenizer trained here, on
both sides. The decontaminated side's time includes reading and indexing the eval set
(`guideloom.workers.decontam.prepare`, what the driver does once per job) and checking every
document's 13-grams; 1% of the documents carry a planted leak, so it also drops and lists some.
Figures are seconds of wall time per ingestion; the target is a ratio <= 1.15 (decontamination
costs at most 15% of the ingestion). The extra figures give the screening throughput in MB/s
and documents/s of one core, measured on its own (`EvalIndex.check` over the corpus), and the
seconds reading and indexing the eval set take (a fixed cost per job, whatever the corpus size).
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

from benchmarks.harness import Config, Row, interleaved
from benchmarks.ingest_kinds import train_bpe

__all__ = ["decontamination_rows"]

EVAL_ITEMS = 10_000
LEAK_EVERY = 100  # one document in this many carries 20 words of an eval item


def _vocabulary(rng: Any, n: int) -> list[str]:
    letters = list("abcdefghijklmnopqrstuvwxyz")
    return ["".join(rng.choice(letters, int(rng.integers(2, 9)))) for _ in range(n)]


def _text(rng: Any, words: list[str], n: int) -> str:
    chosen = [words[int(i)] for i in rng.integers(0, len(words), n)]
    # some punctuation and capitals, as real text has
    return " ".join(w.capitalize() + "," if k % 11 == 0 else w for k, w in enumerate(chosen)) + "."


def _ingest(options: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Seconds of one ingestion (one part, in process), and its result."""
    from guideloom.workers import decontam
    from guideloom.workers.config import validate_config
    from guideloom.workers.part import part_spec, write_part
    from guideloom.workers.planning import plan_parts
    from guideloom.workers.sources import expand_inputs

    shutil.rmtree(options["output"], ignore_errors=True)
    t0 = time.perf_counter()
    config = validate_config({"progress": "none", "part_size": 2**40, **options})
    config, _ = decontam.prepare(config)  # the driver's share: read and index the eval set
    plan = plan_parts(
        expand_inputs(config.inputs, config.reader_format, {}), part_size=2**40, text_per_line=False
    )
    result = write_part(config, part_spec(plan, 0), "d" * 64)
    return time.perf_counter() - t0, result


def decontamination_rows(cfg: Config) -> list[Row]:
    import numpy as np

    from guideloom.workers import decontam
    from guideloom.workers.config import validate_config

    rng = np.random.default_rng(cfg.seed + 36)
    work = cfg.workdir / "decontaminate"
    work.mkdir(parents=True, exist_ok=True)
    words = _vocabulary(rng, 20_000)
    items = [_text(rng, words, int(rng.integers(30, 120))) for _ in range(EVAL_ITEMS)]
    n_docs = max(200, cfg.ingest_tokens // 300)
    docs = []
    for k in range(n_docs):
        text = _text(rng, words, int(rng.integers(100, 300)))
        if k % LEAK_EVERY == 0:
            item = items[int(rng.integers(0, EVAL_ITEMS))].split()
            text += " " + " ".join(item[:20]).upper()
        docs.append(text)
    eval_file, corpus = work / "eval.jsonl", work / "corpus.jsonl"
    eval_file.write_text("".join(json.dumps({"question": q}) + "\n" for q in items))
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    spec = f"hf:{train_bpe(work / 'tokenizer', docs[:2000], 2000, ['<|endoftext|>'])}"
    out = str(work / "out")
    plain = {"inputs": [str(corpus)], "output": out, "tokenizer": spec, "overwrite": True}
    screened = dict(
        plain,
        decontaminate=[str(eval_file)],
        decontaminate_field="question",
        rejects=str(work / "rejects.jsonl"),
    )
    dropped: list[int] = []

    def with_eval() -> float:
        seconds, result = _ingest(screened)
        dropped.append(sum(result.get("contaminated", {}).values()))
        return seconds

    g, b = interleaved(with_eval, lambda: _ingest(plain)[0], cfg.repeats, not cfg.quick)

    # the screening alone, on one core: MB/s and documents/s of EvalIndex.check
    t0 = time.perf_counter()
    config, _ = decontam.prepare(validate_config(screened))
    build_s = time.perf_counter() - t0
    index = decontam.checker(config)
    assert index is not None
    t0 = time.perf_counter()
    for start in range(0, len(docs), decontam.SCREEN_DOCS):
        index.check(docs[start : start + decontam.SCREEN_DOCS])
    check_s = time.perf_counter() - t0
    megabytes = sum(len(d.encode()) for d in docs) / 1e6
    shutil.rmtree(work, ignore_errors=True)
    expected = len(range(0, n_docs, LEAK_EVERY))
    return [
        Row(
            "decontaminate",
            f"{EVAL_ITEMS:,} eval items, 13-grams, {n_docs:,} documents ({megabytes:.1f} MB), BPE",
            "s",
            g,
            b,
            "the same ingestion without decontamination",
            higher_is_better=False,
            target=1.15,
            extra={
                "eval_ngrams": index.ngrams,
                "eval_index_build_s": round(build_s, 3),
                "documents_dropped": dropped[-1] if dropped else 0,
                "leaks_planted": expected,
                "screen_MB_per_s_per_core": round(megabytes / check_s, 1),
                "screen_docs_per_s_per_core": round(len(docs) / check_s),
            },
            checks={"every planted leak dropped": bool(dropped) and dropped[-1] == expected},
        )
    ]
