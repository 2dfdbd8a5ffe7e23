"""Where a job runs: choose the Ray cluster, check that it answers, or start a local Ray.

One rule: on the cluster named by ``ray_address`` (``--ray-address``) or ``RAY_ADDRESS`` (set by
``ray job submit``), else on a local Ray that the job starts itself (``address="local"``), never
on some other cluster that happens to run on the machine. ``auto`` means the cluster that the
last ``ray start`` on this machine recorded in Ray's default temp dir (``$RAY_TMPDIR/ray``, else
``/tmp/ray``); a cluster started with ``--temp-dir DIR`` records its address in
``DIR/ray_current_cluster`` instead, so ``auto`` does not find it (give its address). It says
which cluster, and for ``auto`` the file it read, on stderr (through ``say``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from guideloom.errors import IngestError
from guideloom.workers.config import IngestConfig

__all__ = ["CONNECT_TIMEOUT_S", "connect"]

CONNECT_TIMEOUT_S = 5.0  # a cluster address that does not answer within this is an error
_LOCAL_HINT = "unset RAY_ADDRESS and drop --ray-address to run on a local Ray that guideloom starts itself"


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` of a GCS (or ``ray://``) address; None for ``auto`` or an unparsable one."""
    if address.startswith("ray://"):
        address = address[len("ray://") :]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


_TEMP_DIR_HINT = (
    "a cluster started with `ray start --temp-dir DIR` records its address in "
    'DIR/ray_current_cluster, not here: give it as --ray-address "$(cat DIR/ray_current_cluster)"'
)


def _resolve_auto() -> tuple[str, Path]:
    """What ``auto`` means here: the address in the session file of the last ``ray start`` on
    this machine without ``--temp-dir`` (never "any Ray process found running", Ray's legacy
    fallback), and that file."""
    from ray._common.utils import get_default_ray_temp_dir

    path = Path(get_default_ray_temp_dir()) / "ray_current_cluster"
    try:
        address = path.read_text().strip()
    except OSError:
        address = ""
    if not address:
        raise IngestError(
            f"--ray-address auto: no running cluster recorded in {path} (no `ray start` with the "
            f"default temp dir here); {_TEMP_DIR_HINT}; or give the cluster's address "
            "(host:6379), or drop --ray-address to run on a local Ray"
        )
    return address, path


def _check_reachable(address: str, source: str) -> None:
    """Fail fast (``CONNECT_TIMEOUT_S``) when nothing listens at the cluster address."""
    if address.startswith(("http://", "https://")):
        raise IngestError(
            f"{source} {address} is a dashboard (Jobs API) address: submit the command with "
            f"`ray job submit --address {address} -- guideloom ingest ...`, or give the cluster's "
            f"GCS address (host:6379); or {_LOCAL_HINT}"
        )
    target = _host_port(address)
    if target is None:
        return
    try:
        socket.create_connection(target, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        raise IngestError(
            f"no Ray cluster answers at {target[0]}:{target[1]} ({source} {address}): "
            f"{type(err).__name__}: {err}. Start the cluster or fix the address; or {_LOCAL_HINT}"
        ) from None


def _job_config() -> dict[str, Any]:
    """Ray puts the driver's working folder on its workers' import path. When that folder holds
    a folder named ``guideloom`` that is not the imported package (the folder that contains a
    clone: git names the clone ``guideloom``), the workers of an editable install import it as an
    empty namespace package (``module 'guideloom' has no attribute 'StreamStorage'``): the
    install's own finder runs after the path finder. Naming the folder the imported package comes
    from on the workers' path makes the path finder find the real package first (a regular
    package wins over namespace portions wherever they sit on the path). Returns ``ray.init``'s
    keyword arguments for that: none when nothing is shadowed."""
    import guideloom

    here = Path(guideloom.__file__).resolve().parent
    shadow = Path.cwd() / "guideloom"
    if not shadow.exists() or shadow.resolve() == here:
        return {}
    return {"job_config": ray.job_config.JobConfig(_py_driver_sys_path=[str(here.parent)])}


def connect(config: IngestConfig, say: Callable[[str], None]) -> bool:
    """Connect to Ray; True when this call started a local Ray (and so must shut it down).

    Nothing happens when Ray is already initialized in this process (a test's or a notebook's
    Ray is used as it is).

    Raises:
        IngestError: ``auto`` with no cluster recorded, a dashboard (http) address, an address
            where nothing answers, or a cluster this process cannot join.
    """
    if ray.is_initialized():
        return False
    if config.ray_address:
        address, source = config.ray_address, "--ray-address"
    else:
        address, source = os.environ.get("RAY_ADDRESS", ""), "RAY_ADDRESS"
    if address:
        if address == "auto":
            address, recorded = _resolve_auto()
            source = f"{source} auto, recorded in {recorded}"
            try:
                _check_reachable(address, source)
            except IngestError as err:
                raise IngestError(f"{err}. The recorded cluster is gone; {_TEMP_DIR_HINT}") from None
        else:
            _check_reachable(address, source)
        try:
            ray.init(address=address, **_job_config(), log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise IngestError(
                f"cannot join the Ray cluster at {address} ({source}): {err}. A driver must run "
                "on a node of the cluster: submit it with `ray job submit`; or unset "
                "RAY_ADDRESS and drop --ray-address to run on a local Ray"
            ) from None
        say(
            f"running on the Ray cluster at {address} ({source}; "
            f"{int(ray.cluster_resources().get('CPU', 0))} CPUs)"
        )
        return False
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address="local",
        num_cpus=config.num_workers,
        **_job_config(),
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    say(
        f"started a local Ray ({int(ray.cluster_resources().get('CPU', 0))} CPUs); "
        "--ray-address or RAY_ADDRESS runs on a cluster instead"
    )
    return True
