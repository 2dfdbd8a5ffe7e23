"""``guideloom convert --ray``: the parts of a conversion of other projects' token files
(`guideloom.storage.foreign.convert`) written as Ray tasks, one per token file.

The driver plans and commits as the plain path does; each task runs the same
`guideloom.storage.foreign.convert.convert_part`, so the dataset is the same bytes either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import ray

from guideloom.storage.foreign.convert import ConvertPlan, convert_part
from guideloom.workers.config import IngestConfig
from guideloom.workers.connect import connect

__all__ = ["ray_parts"]


@ray.remote(max_retries=3)
def _part(plan: ConvertPlan, k: int) -> int:
    return convert_part(plan, k)


def ray_parts(
    plan: ConvertPlan,
    *,
    ray_address: str | None = None,
    num_workers: int | None = None,
    say: Callable[[str], None] | None = None,
) -> None:
    """Write every part of ``plan`` as a Ray task (a part that fails fails the call; its retry
    writes under a new attempt, as any part writer's does).

    Args:
        plan: From `guideloom.storage.foreign.convert.plan_convert`.
        ray_address: The Ray cluster (default ``$RAY_ADDRESS``, else a local Ray started here and
            stopped after).
        num_workers: CPUs of a local Ray (default: all).
        say: Where progress lines go (default: stderr).
    """
    tell = say or (lambda line: print(line, file=sys.stderr))
    config = IngestConfig(
        inputs=[plan.source.url], output=plan.output, ray_address=ray_address, num_workers=num_workers
    )
    started = connect(config, tell)
    try:
        refs: list[Any] = [_part.remote(plan, k) for k in range(plan.num_parts)]
        records = ray.get(refs)
        tell(f"converted {plan.num_parts} files ({sum(records):,} documents) on Ray")
    finally:
        if started:
            ray.shutdown()
