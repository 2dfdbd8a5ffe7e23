"""Row ``ingest-kinds``: chat and stream-with-meta ingestion against plain stream ingestion.

One part, in process (``write_part``, no Ray), with the same byte-level BPE tokenizer (trained
here; ``<|im_start|>``/``<|im_end|>`` special) on both sides of each pair:

- chat: conversations rendered with the shipped ChatML template, tokenized piece by piece with
  a loss mask, against the same rendered texts ingested as plain documents;
- stream with metadata: records with two ``meta_fields`` and character spans (mapped to tokens
  through the offset mapping), against the same texts as plain documents.

Figures are tokens per second; the target is 0.8x the plain stream.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import Config, Row, interleaved

__all__ = ["ingest_kind_rows"]

WORDS = "the quick brown fox jumps over a lazy dog while tokenizers turn text into ids for training".split()


def _sentence(rng: Any, n: int) -> str:
    return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), n)) + "."


def _tokenizer_dir(directory: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts[:2000], trainer)
    folder = directory / "bench-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def _one_part(options: dict[str, Any]) -> float:
    from guideloom.workers.config import validate_config
    from guideloom.workers.part import part_spec, write_part
    from guideloom.workers.planning import plan_parts
    from guideloom.workers.sources import expand_inputs

    shutil.rmtree(options["output"], ignore_errors=True)
    config = validate_config({"progress": "none", "part_size": 2**40, **options})
    plan = plan_parts(
        expand_inputs(config.inputs, config.reader_format, {}), part_size=2**40, text_per_line=False
    )
    t0 = time.perf_counter()
    result = write_part(config, part_spec(plan, 0), "b" * 64)
    return float(result["tokens"]) / (time.perf_counter() - t0)


def ingest_kind_rows(cfg: Config) -> list[Row]:
    import numpy as np

    from guideloom.workers.chat import chat_renderer
    from guideloom.workers.tokenizer import load_tokenizer

    rng = np.random.default_rng(cfg.seed + 20)
    work = cfg.workdir / "ingest-kinds"
    work.mkdir(parents=True, exist_ok=True)
    n = max(200, cfg.ingest_tokens // 400)  # about 400 tokens a conversation
    conversations = [
        [
            {"role": "system", "content": _sentence(rng, 8)},
            {"role": "user", "content": _sentence(rng, 30)},
            {"role": "assistant", "content": _sentence(rng, 80)},
            {"role": "user", "content": _sentence(rng, 20)},
            {"role": "assistant", "content": _sentence(rng, 60)},
        ]
        for _ in range(n)
    ]
    spec = f"hf:{_tokenizer_dir(work, [m['content'] for c in conversations[:500] for m in c])}"
    renderer = chat_renderer("chatml", load_tokenizer(spec))
    rendered = [renderer.render(c, "assistant").text for c in conversations]
    chat_in, plain_chat_in = work / "chat.jsonl", work / "chat-plain.jsonl"
    chat_in.write_text("".join(json.dumps({"messages": c}) + "\n" for c in conversations))
    plain_chat_in.write_text("".join(json.dumps({"text": t}) + "\n" for t in rendered))

    records = []
    for k in range(n):
        text = " ".join(_sentence(rng, 25) for _ in range(6))
        spans, pos = [], 0
        while True:  # an annotation on every fourth word or so
            a = text.find(" ", pos + int(rng.integers(60, 140)))
            b = text.find(" ", a + 1)
            if a < 0 or b < 0:
                break
            spans.append({"start": a + 1, "end": b, "kind": int(k % 5)})
            pos = b
        records.append({"text": text, "source": f"site{k % 7}", "score": float(k % 10) / 10, "spans": spans})
    meta_in, plain_meta_in = work / "meta.jsonl", work / "meta-plain.jsonl"
    meta_in.write_text("".join(json.dumps(r) + "\n" for r in records))
    plain_meta_in.write_text("".join(json.dumps({"text": r["text"]}) + "\n" for r in records))

    base = {"tokenizer": spec, "overwrite": True}
    out = str(work / "out")
    chat = dict(base, inputs=[str(chat_in)], output=out, input_format="chat", chat_template="chatml")
    plain_chat = dict(base, inputs=[str(plain_chat_in)], output=out)
    spans_per_record = sum(len(r["spans"]) for r in records) / len(records)
    fields_only = dict(
        base, inputs=[str(meta_in)], output=out, layout="stream-with-meta", meta_fields=["source", "score"]
    )
    meta = dict(fields_only, spans_field="spans")
    plain_meta = dict(base, inputs=[str(plain_meta_in)], output=out)
    warm = not cfg.quick
    c, cp = interleaved(lambda: _one_part(chat), lambda: _one_part(plain_chat), cfg.repeats, warmup=warm)
    f, fp = interleaved(
        lambda: _one_part(fields_only), lambda: _one_part(plain_meta), cfg.repeats, warmup=warm
    )
    m, mp = interleaved(lambda: _one_part(meta), lambda: _one_part(plain_meta), cfg.repeats, warmup=warm)
    shutil.rmtree(work, ignore_errors=True)
    return [
        Row(
            "ingest-kinds",
            f"chat (chatml, loss_mask), {n:,} conversations",
            "tokens/s",
            c,
            cp,
            "plain stream of the rendered text",
            target=0.8,
        ),
        Row(
            "ingest-kinds",
            f"stream-with-meta, 2 meta fields, {n:,} records",
            "tokens/s",
            f,
            fp,
            "plain stream of the same text",
            target=0.8,
        ),
        Row(
            "ingest-kinds",
            f"stream-with-meta, 2 meta fields + {spans_per_record:.0f} char spans a record",
            "tokens/s",
            m,
            mp,
            "plain stream of the same text",
            target=0.8,
        ),
    ]
