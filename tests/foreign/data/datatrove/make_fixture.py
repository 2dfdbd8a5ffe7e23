"""Run with datatrove 0.10.1 + tokenizers in a venv of their own (see tests/foreign/data/README.md)."""

import json
import sys

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
from tokenizers import Tokenizer

src, out, tok = sys.argv[1:4]
LocalPipelineExecutor(
    pipeline=[
        JsonlReader(src, text_key="text", glob_pattern="*.jsonl", doc_progress=False),
        DocumentTokenizer(
            out, tokenizer_name_or_path=tok, eos_token="<|endoftext|>", shuffle_documents=False
        ),
    ],
    tasks=1,
    workers=1,
    logging_dir=out + "-logs",
    skip_completed=False,
).run()
t = Tokenizer.from_file(tok)
eos = t.token_to_id("<|endoftext|>")
docs = [t.encode(json.loads(line)["text"]).ids + [eos] for line in open(src + "/in.jsonl")]
json.dump({"eos_id": eos, "documents": docs}, open(out + "/expected.json", "w"))
