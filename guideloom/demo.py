"""The README's main job: ``python -m guideloom.demo [--output DIR]`` (``make demo``).

Ingests the corpus shipped in ``workers/data/`` (King James Version chapters, public domain) on
a local Ray with the built-in ``bytes`` tokenizer into a local directory (``demo-output/kjv`` by
default; a re-run finds the committed dataset and reuses it), reads it back through
``StatefulDataLoader.from_storage`` and prints a few decoded windows and what was written.
Needs the ``ray`` extra (and ``torch`` for the loader; without torch it reads with
``StreamDataset``).
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

# The corpus ships inside the installed package (repository folder workers/data/).
CORPUS = Path(str(resources.files("guideloom.workers") / "data"))
SEQUENCE_LENGTH = 256


def _batches(storage: Any, count: int) -> list[Any]:
    """The first ``count`` windows: through the loader when torch is there, else the view."""
    try:
        import warnings

        from guideloom import StatefulDataLoader

        # torchdata 0.11 warns about its own use of a deprecated torch API on every iterator.
        warnings.filterwarnings("ignore", message=".*set_vital.*")

        loader = StatefulDataLoader.from_storage(
            storage, sequence_length=SEQUENCE_LENGTH, batch_size=count, shuffle=True, seed=0
        )
        batch = next(iter(loader))
        return [row for row in batch["tokens"].tolist()]
    except ImportError:
        from guideloom import StreamDataset

        ds = StreamDataset(storage, sequence_length=SEQUENCE_LENGTH)
        return [ds[i]["tokens"].tolist() for i in range(min(count, len(ds)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guideloom.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="demo-output/kjv", help="dataset directory or URL")
    parser.add_argument("--overwrite", action="store_true", help="replace a dataset already there")
    args = parser.parse_args(argv)
    output = args.output
    from guideloom.workers.ingest import run_ingest
    from guideloom.workers.output import open_storage
    from guideloom.workers.tokenizer import load_tokenizer

    config: dict[str, Any] = {
        "inputs": [str(CORPUS / "*.jsonl")],
        "output": output,
        "tokenizer": "bytes",
        "part_size": 128 * 1024,  # a few parts even for this small corpus: every worker works
        "progress": "plain",
        "num_workers": 2,
        "runner": "ray",  # the demo shows the Ray path; a job this small alone would run inline
        "overwrite": args.overwrite,
    }
    manifest = run_ingest(config)
    from guideloom.workers.config import IngestConfig

    job = IngestConfig(**config)
    tokenizer = load_tokenizer(job.tokenizer)
    storage = open_storage(job, tokenizer)
    print(f"\ndataset {storage.url}: manifest.json + {len(manifest.shards)} shards")
    for shard in manifest.shards[:4]:
        for info in shard.files.values():
            print(f"  {info.path}  {info.size:,} bytes  {shard.tokens:,} tokens  {info.checksum}")
    print(f"  total {manifest.total_tokens:,} tokens, {manifest.total_bytes:,} bytes")
    print(f"\nread back ({SEQUENCE_LENGTH}-token windows, shuffled, seed 0):")
    for i, window in enumerate(_batches(storage, 3)):
        text = tokenizer.decode(window).replace("\n", " ")
        print(f"  [{i}] {text[:160]}...")
    _show_resume(storage)
    print(f"\ninspect it with: .venv/bin/guideloom inspect {storage.url}")
    return 0


def _show_resume(storage: Any) -> None:
    """Checkpoint a loader mid-epoch, restore it into a new one with other workers, compare."""
    try:
        from guideloom import StatefulDataLoader
    except ImportError:  # no torch: nothing to show
        return

    def make(workers: int) -> Any:
        return StatefulDataLoader.from_storage(
            storage, sequence_length=SEQUENCE_LENGTH, batch_size=4, shuffle=True, seed=0, num_workers=workers
        )

    reference = make(0)
    batches = iter(reference)
    for _ in range(10):
        next(batches)
    state = reference.state_dict()
    expected = next(batches)["tokens"]
    resumed = make(2)  # another number of workers than the checkpoint was taken with
    resumed.load_state_dict(state)
    got = next(iter(resumed))["tokens"]
    same = bool((got == expected).all())
    logical = state["guideloom_loader"]
    print(
        f"\nresume: checkpoint after 10 batches (epoch {logical['epoch']}, position "
        f"{logical['position']}, {len(json.dumps(state))} bytes as JSON), restored into a loader "
        f"with num_workers=2: next batch identical: {same}"
    )
    if not same:
        raise SystemExit("resume check failed: the restored loader returned another batch")


if __name__ == "__main__":
    raise SystemExit(main())
