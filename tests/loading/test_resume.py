"""Exact resume for all three layouts, local, S3, GCS and Azure, num_workers 0 and 2, elastic world sizes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from guideloom.testing import assert_exact_resume

LAYOUTS = ["documents", "stream", "stream_with_meta"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_exact_resume(
    layout: str,
    dataset_url: tuple[str, dict[str, Any]],
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    url, options = dataset_url
    remote = url.startswith(("s3://", "gs://", "az://"))
    # every range request and every worker's new client costs real time: keep object stores small
    storage = write_dataset(layout, url, options, size=32 if remote else 64)
    make_loader = make_loader_for(storage, batch_size=4, shuffle=True, seed=7)
    if remote:
        assert_exact_resume(make_loader, world_sizes=(1,), elastic=((4, 2),))
    else:
        assert_exact_resume(make_loader)


@pytest.mark.parametrize(
    "settings",
    [
        {"shuffle": False},
        {"shuffle": "block", "shuffle_block_size": 5, "shuffle_buffer_blocks": 2, "seed": 3},
        {"shuffle": True, "drop_last": True, "batch_size": 3},
    ],
    ids=["sequential", "block", "drop_last"],
)
def test_exact_resume_other_settings(
    settings: dict[str, Any],
    tmp_path: Any,
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=61)
    settings = {"batch_size": 2, **settings}
    assert_exact_resume(
        make_loader_for(storage, **settings), worker_counts=(0,), world_sizes=(1, 3), elastic=((4, 3), (2, 5))
    )


def test_the_helper_catches_a_loader_that_restarts(
    tmp_path: Any,
    make_loader_for: Callable[..., Callable[..., Any]],
    write_dataset: Callable[..., Any],
) -> None:
    storage = write_dataset("stream", str(tmp_path / "ds"), {}, size=16)
    make_loader = make_loader_for(storage, batch_size=2, shuffle=True)

    def forgetful(**kwargs: Any) -> Any:
        loader = make_loader(**kwargs)
        loader.load_state_dict = lambda state: None  # silently restarts: the bug users complain of
        return loader

    with pytest.raises(AssertionError, match="resumed after"):
        assert_exact_resume(forgetful, worker_counts=(0,), world_sizes=(1,), elastic=())
