"""Row ``ingest-kinds``: chat and stream-with-meta ingestion against plain stream ingestion.

One part, in process (``write_part``, no Ray), with the same byte-level BPE tokenizer (trained
here; ``<|im_start|>``/``<|im_end|>`` special) on both sides of each pair:

- chat: conversations rendered with the shipped ChatML template, tokenized piece by piece with
  a loss mask, against the same rendered texts ingested as plain documents;
- stream with metadata: records with two ``meta_fields`` and character spans (mapped to tokens
  through the offset mapping), against the same texts as plain documents.

Figures are characters of input text per second (the same text on both sides): the plain side
encodes ChatML's markers as ordinary text, several tokens each, where chat ingestion makes each
one special token, so tokens per second would favour the plain side; the tokens each side wrote
are in the row's extra figures. With the ``bytes`` tokenizer both sides write the same tokens.
The target is 0.8x the plain stream.
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


def train_bpe(
    folder: Path, texts: list[str], vocab_size: int, special_tokens: list[str], eos_token: str | None = None
) -> Path:
    """A byte-level BPE of ``vocab_size`` ids trained on ``texts``, saved as ``folder``'s
    ``tokenizer.json`` (and a ``tokenizer_config.json`` naming ``eos_token``, where given): a
    folder ``hf:FOLDER`` loads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    if eos_token is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": eos_token}))
    return folder


def _tokenizer_dir(directory: Path, texts: list[str]) -> Path:
    return train_bpe(
        directory / "bench-tokenizer", texts[:2000], 2000, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    )


_TOKENS: dict[str, int] = {}  # tokens each kind of job wrote (the rows' extra figures)


def _one_part(options: dict[str, Any], chars: int, key: str) -> float:
    """Characters of input text per second of one part written in process."""
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
    seconds = time.perf_counter() - t0
    _TOKENS[key] = int(result["tokens"])
    return chars / seconds


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

    records: list[dict[str, Any]] = []
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
    chat_chars = sum(len(t) for t in rendered)
    meta_chars = sum(len(r["text"]) for r in records)
    chat = dict(base, inputs=[str(chat_in)], output=out, input_format="chat", chat_template="chatml")
    plain_chat = dict(base, inputs=[str(plain_chat_in)], output=out)
    byte_chat = dict(chat, tokenizer="bytes")
    byte_plain_chat = dict(plain_chat, tokenizer="bytes")
    spans_per_record = sum(len(r["spans"]) for r in records) / len(records)
    fields_only = dict(
        base, inputs=[str(meta_in)], output=out, layout="stream-with-meta", meta_fields=["source", "score"]
    )
    meta = dict(fields_only, spans_field="spans")
    plain_meta = dict(base, inputs=[str(plain_meta_in)], output=out)
    warm = not cfg.quick

    def pair(
        ours: dict[str, Any], theirs: dict[str, Any], chars: int, key: str
    ) -> tuple[Any, Any, dict[str, Any]]:
        g, b = interleaved(
            lambda: _one_part(ours, chars, key),
            lambda: _one_part(theirs, chars, key + "-plain"),
            cfg.repeats,
            warm,
        )
        return g, b, {"characters": chars, "tokens": _TOKENS[key], "plain_tokens": _TOKENS[key + "-plain"]}

    rows = [
        ("chat (chatml, loss_mask), BPE", pair(chat, plain_chat, chat_chars, "chat"), "the rendered text"),
        (
            "chat (chatml, loss_mask), bytes",
            pair(byte_chat, byte_plain_chat, chat_chars, "chat-bytes"),
            "the rendered text",
        ),
        (
            "stream-with-meta, 2 meta fields, BPE",
            pair(fields_only, plain_meta, meta_chars, "meta"),
            "the same text",
        ),
        (
            f"stream-with-meta, 2 meta fields + {spans_per_record:.0f} char spans a record, BPE",
            pair(meta, plain_meta, meta_chars, "spans"),
            "the same text",
        ),
    ]
    shutil.rmtree(work, ignore_errors=True)
    return [
        Row(
            "ingest-kinds",
            f"{case}, {n:,} records",
            "characters/s",
            g,
            b,
            f"plain stream of {what}",
            target=0.8,
            extra=extra,
        )
        for case, (g, b, extra), what in rows
    ]
