"""Each part's tokenizer thread pool is sized to the CPUs per part running at once, so parts that
run side by side do not oversubscribe a node; a RAYON_NUM_THREADS the user set is kept."""

from __future__ import annotations

import os

import pytest

from guideloom.workers import driver
from guideloom.workers.config import IngestConfig


def _config(tmp_path, workers):
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    given = {"num_workers": workers} if workers else {}  # none given: twice the cluster's CPUs in flight
    return IngestConfig(inputs=[str(tmp_path / "in.jsonl")], output=str(tmp_path / "out"), **given)


@pytest.mark.parametrize(
    ("cpus", "workers", "threads"),
    [(2, 1, 2), (2, 2, 1), (8, 2, 4), (8, 3, 2), (8, 0, 1), (2, 0, 1), (1, 4, 1)],
)
def test_threads_per_part_are_the_cpus_over_the_parts_at_once(tmp_path, monkeypatch, cpus, workers, threads):
    monkeypatch.setattr(driver.ray, "cluster_resources", lambda: {"CPU": float(cpus)})
    assert driver.threads_per_part(_config(tmp_path, workers)) == threads


def test_the_pool_size_goes_to_rayon_unless_the_user_set_one(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    driver._size_thread_pool(3)
    assert os.environ["RAYON_NUM_THREADS"] == "3"
    monkeypatch.setenv("RAYON_NUM_THREADS", "7")
    driver._size_thread_pool(1)
    assert os.environ["RAYON_NUM_THREADS"] == "7"
