"""``python -m benchmarks.ingest_peers`` (part of ``make bench-peers``): ``guideloom ingest``
beside datatrove's tokenization pipeline on the same corpus and the same tokenizer (issue 25
item 1).

- The corpus: the shipped ``workers/data`` JSON Lines repeated ``--scale`` times, as files.
- The tokenizer: a byte-level BPE trained here on the corpus (``tokenizers``, vocabulary 8,000),
  saved as one ``tokenizer.json`` both sides load (GuideLoom as ``hf:FOLDER``, datatrove as
  ``tokenizer_name_or_path``); an end-of-document token after every document on both.
- datatrove 0.10.1 in a virtual environment of its own (``$GUIDELOOM_PEERS_ENV/datatrove``,
  built once with pip): ``JsonlReader`` -> ``DocumentTokenizer`` (``shuffle_documents=False``,
  ``.ds`` files of token ids) on ``LocalPipelineExecutor`` with ``tasks = workers = N``.
- GuideLoom: ``ingest`` with ``N`` workers, with Ray already running on the machine's CPUs (a job
  submitted to a running node: ``run_ingest`` in this process after ``ray.init``) and from a cold
  start (the ``guideloom ingest`` command in a fresh process: a job of this size runs inline,
  with no Ray to start; ``runner=`` in `guideloom.workers.config.IngestConfig`).
- ``tokenizer-limit``: the same tokenizer encoding the same texts from memory with
  ``encode_batch`` on every core, in a process of its own: the physical limit of any ingestion
  here; GuideLoom's warm run with as many workers as cores should reach 0.9x of it.

Each side is timed end to end: datatrove "warm" from its executor's ``run()`` (imports done) and
"cold" as its process's wall time; tokens/s are the tokens each side wrote. CPU seconds are the
whole machine's (``/proc/stat`` user + system over the run: Ray's daemons, datatrove's worker
pool and every child count), so run it on a quiet machine.

Megatron-LM's ``tools/preprocess_data.py`` is not measured: ``megatron-core`` (0.16.1 on PyPI)
installs on this CPU machine, but the script is not in the wheel (only its writer,
``megatron.core.datasets.indexed_dataset``), and its repository cannot be fetched here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.harness import Row, stats, table_lines  # noqa: E402
from benchmarks.ingest_bench import _corpus  # noqa: E402
from benchmarks.ingest_kinds import train_bpe  # noqa: E402

__all__ = ["main", "measure"]

DATATROVE = "datatrove[io]==0.10.1"
EOS = "<|endoftext|>"

_DATATROVE_RUN = r"""
import json, sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens.tokenizer import DocumentTokenizer
src, out, logs, tok, n = sys.argv[1:6]
executor = LocalPipelineExecutor(
    pipeline=[
        JsonlReader(src, text_key="text", glob_pattern="*.jsonl", doc_progress=False),
        DocumentTokenizer(out, tokenizer_name_or_path=tok, eos_token="<|endoftext|>", shuffle_documents=False),
    ],
    tasks=int(n), workers=int(n), logging_dir=logs, skip_completed=False,
)
t = time.perf_counter()
executor.run()
print(json.dumps({"run_s": time.perf_counter() - t}))
"""


def _env(cache: Path) -> Path:
    """datatrove's interpreter, building its virtual environment once."""
    python = cache / "datatrove" / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(cache / "datatrove")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", DATATROVE, "tokenizers"], check=True)
    return python


def machine_cpu_s() -> float:
    """CPU seconds the whole machine has spent in user and system mode since boot."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _child(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``argv``; (wall seconds, the machine's CPU seconds meanwhile, stdout)."""
    t, cpu = time.perf_counter(), machine_cpu_s()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall, used = time.perf_counter() - t, machine_cpu_s() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, used, done.stdout


def _datatrove(python: Path, src: Path, out: Path, tok: Path, n: int) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    logs = out.with_name(out.name + "-logs")
    shutil.rmtree(logs, ignore_errors=True)
    wall, cpu, stdout = _child(
        [
            str(python),
            "-c",
            _DATATROVE_RUN,
            str(src),
            str(out),
            str(logs),
            str(tok / "tokenizer.json"),
            str(n),
        ]
    )
    run_s = json.loads(stdout.strip().splitlines()[-1])["run_s"]
    size = sum(p.stat().st_size for p in out.rglob("*.ds"))
    tokens = size // 2  # uint16 ids: the vocabulary is below 65,536
    return {"tokens": tokens, "warm_s": run_s, "cold_s": wall, "cpu_s": cpu}


def _guideloom_warm(paths: list[Path], out: Path, tok: Path, n: int) -> dict[str, float]:
    from guideloom.workers.ingest import run_ingest

    shutil.rmtree(out, ignore_errors=True)
    t, cpu = time.perf_counter(), machine_cpu_s()
    manifest = run_ingest(
        {
            "inputs": [str(p) for p in paths],
            "output": str(out),
            "tokenizer": f"hf:{tok}",
            "part_size": 2**20,
            "num_workers": n,
            "progress": "none",
        }
    )
    return {
        "tokens": manifest.total_tokens,
        "warm_s": time.perf_counter() - t,
        "cpu_s": machine_cpu_s() - cpu,
    }


def _guideloom_cold(paths: list[Path], out: Path, tok: Path, n: int) -> dict[str, float]:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    cli = str(Path(sys.executable).with_name("guideloom"))
    argv = [cli, "ingest", *map(str, paths), "--output", str(out), "--tokenizer", f"hf:{tok}"]
    wall, cpu, _ = _child([*argv, "--part-size", "1MiB", "--num-workers", str(n), "--quiet"], env)
    from guideloom import open as open_dataset

    return {"tokens": open_dataset(str(out)).manifest.total_tokens, "cold_s": wall, "cpu_s": cpu}


_TOKENIZER_LIMIT = r"""
import json, sys, time
from tokenizers import Tokenizer
texts = [json.loads(line)["text"] for path in sys.argv[2:] for line in open(path) if line.strip()]
tok = Tokenizer.from_file(sys.argv[1])
t = time.perf_counter()
tokens = sum(len(e.ids) + 1 for i in range(0, len(texts), 1024) for e in tok.encode_batch(texts[i:i + 1024]))
print(json.dumps({"tokens": tokens, "run_s": time.perf_counter() - t}))
"""


def _tokenizer_limit(paths: list[Path], tok: Path) -> dict[str, float]:
    """The tokenizer alone on every core (its own thread pool, unsized), the texts already in
    memory: what no ingestion of this corpus with this tokenizer can beat (tokens + one EOS per
    document, as both pipelines write)."""
    _, _, out = _child(
        [sys.executable, "-c", _TOKENIZER_LIMIT, str(tok / "tokenizer.json"), *map(str, paths)]
    )
    result = json.loads(out.strip().splitlines()[-1])
    return {"tokens": result["tokens"], "run_s": result["run_s"]}


def measure(scale: int, workers: tuple[int, ...], repeats: int, cache: Path) -> list[Row]:
    import ray

    python = _env(cache)
    tmp = Path(tempfile.mkdtemp(prefix="gl-ingest-peers-"))
    rows: list[Row] = []
    try:
        src = tmp / "corpus"
        src.mkdir()
        paths, texts = _corpus(src, scale)  # the `ingest` row's corpus: the shipped text, scale times
        tok = train_bpe(tmp / "tokenizer", texts[: len(texts) // scale], 8000, [EOS], eos_token=EOS)
        limit = [_tokenizer_limit(paths, tok) for _ in range(repeats)]
        cpus = os.cpu_count() or 1
        for n in workers:
            dt = [_datatrove(python, src, tmp / f"dt-{n}", tok, n) for _ in range(repeats)]
            cold = [_guideloom_cold(paths, tmp / f"gl-cold-{n}", tok, n) for _ in range(repeats)]
            # the node's CPUs, whatever n: a job of n workers on a node (one part alone gets every core)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
            try:
                _guideloom_warm(paths, tmp / f"gl-warm-{n}", tok, n)  # the workers import first
                warm = [_guideloom_warm(paths, tmp / f"gl-warm-{n}", tok, n) for _ in range(repeats)]
            finally:
                ray.shutdown()
            ours_tokens, theirs_tokens = warm[-1]["tokens"], dt[-1]["tokens"]
            extra = {
                "guideloom_tokens": ours_tokens,
                "datatrove_tokens": theirs_tokens,
                "input_bytes": sum(p.stat().st_size for p in paths),
                "guideloom_cold_cpu_s": cold[-1]["cpu_s"],
                "guideloom_warm_cpu_s": warm[-1]["cpu_s"],
                "datatrove_cpu_s": dt[-1]["cpu_s"],
            }
            rows.append(
                Row(
                    "peer-datatrove-ingest",
                    f"{n} worker(s), Ray already running",
                    "tokens/s",
                    stats([ours_tokens / r["warm_s"] for r in warm]),
                    stats([theirs_tokens / r["warm_s"] for r in dt]),
                    "datatrove 0.10.1 (executor run)",
                    target=1.0,
                    extra=extra,
                )
            )
            rows.append(
                Row(
                    "peer-datatrove-ingest",
                    f"{n} worker(s), Ray already running, against the tokenizer alone on {cpus} cores",
                    "tokens/s",
                    stats([ours_tokens / r["warm_s"] for r in warm]),
                    stats([r["tokens"] / r["run_s"] for r in limit]),
                    "tokenizer-limit (encode_batch, texts in memory)",
                    target=0.9 if n == cpus else None,
                )
            )
            rows.append(
                Row(
                    "peer-datatrove-ingest",
                    f"{n} worker(s), cold start (a fresh process)",
                    "tokens/s",
                    stats([r["tokens"] / r["cold_s"] for r in cold]),
                    stats([theirs_tokens / r["cold_s"] for r in dt]),
                    "datatrove 0.10.1 (its process)",
                    target=1.0,
                )
            )
            rows.append(
                Row(
                    "peer-datatrove-ingest",
                    f"{n} worker(s), per CPU second (GuideLoom with Ray running; datatrove's process)",
                    "tokens/CPU s",
                    stats([r["tokens"] / r["cpu_s"] for r in warm]),
                    stats([theirs_tokens / r["cpu_s"] for r in dt]),
                    "datatrove 0.10.1 (the machine's CPU)",
                )
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ingest_peers", description=__doc__.splitlines()[0])
    p.add_argument(
        "--scale", type=int, default=24, help="copies of the shipped corpus (about 100k tokens each)"
    )
    p.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cache = Path(os.environ.get("GUIDELOOM_PEERS_ENV", Path.home() / ".cache" / "guideloom-peers"))
    rows = measure(args.scale, tuple(int(w) for w in args.workers.split(",")), args.repeats, cache)
    print("\n".join(table_lines(rows)))
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in rows], default=str, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
