"""The S3 endpoint the test session runs against: an external one, Ceph RGW, or moto's server.

Precedence (decided by `choose_backend`, before any fixture runs, so the report header can say it):

1. `GUIDELOOM_TEST_S3_ENDPOINT` is set: use it, with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
   (for instance MinIO from `docker-compose.yml`, or a cluster from `scripts/s3/start-rgw.sh`).
2. `radosgw` is installed and `GUIDELOOM_TEST_S3` is not `moto`: start a throwaway Ceph RGW with
   `scripts/s3/start-rgw.sh` (about 12 s, once per session). It checks SigV4 signatures and behaves
   like production S3. If it fails to start, the session falls back to moto and says so, unless
   `GUIDELOOM_TEST_S3=rgw` demands RGW.
3. Otherwise moto's `ThreadedMotoServer` in this process (0.25 s; no signature checks, and range
   requests slow down as objects grow: keep objects small).

Everything is plain HTTP on 127.0.0.1, reached through s3fs exactly as a user would.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
START_RGW = REPO_ROOT / "scripts" / "s3" / "start-rgw.sh"
STOP_RGW = REPO_ROOT / "scripts" / "s3" / "stop-rgw.sh"

ENDPOINT_ENV = "GUIDELOOM_TEST_S3_ENDPOINT"
# Under pytest-xdist the controller starts one endpoint for every worker and writes its details
# (`S3Endpoint.to_json`) to the file this variable names; workers wait for the file.
SHARED_ENV = "GUIDELOOM_TEST_S3_SHARED"
RGW_START_TIMEOUT_S = 180
SHARED_WAIT_S = RGW_START_TIMEOUT_S + 60  # a failed RGW start, then moto
BACKEND_ENV = "GUIDELOOM_TEST_S3"  # "moto", "rgw" (required) or unset (automatic)
# moto accepts any credentials; RGW gets these from start-rgw.sh's endpoint.env.
MOTO_KEY = "testing"
MOTO_SECRET = "testing"
DEFAULT_REGION = "us-east-1"


@dataclass
class S3Endpoint:
    """A running S3 endpoint: `url` is `http://127.0.0.1:PORT`; `stop()` shuts it down."""

    backend: str  # "external", "rgw" or "moto"
    url: str
    key: str
    secret: str
    description: str
    start_seconds: float = 0.0
    _stop: Callable[[], None] | None = field(default=None, repr=False)
    cluster_dir: Path | None = None  # RGW: the cluster's folder (its ceph.conf), for radosgw-admin

    def add_user(self, uid: str, key: str, secret: str) -> None:
        """RGW only: create another S3 user with these keys (radosgw-admin, as start-rgw.sh
        creates the first); bucket policies can then grant it less than the owner has."""
        if self.cluster_dir is None:
            raise RuntimeError(f"{self.backend}: only an RGW started here can add users")
        conf = self.cluster_dir / "ceph.conf"
        socket = self.cluster_dir / "run" / f"admin-{uid}.asok"
        subprocess.run(
            [
                "radosgw-admin",
                "-c",
                str(conf),
                "-n",
                "client.rgw.test",
                "--admin-socket",
                str(socket),
                "user",
                "create",
                f"--uid={uid}",
                f"--display-name={uid}",
                f"--access-key={key}",
                f"--secret={secret}",
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def storage_options(self, endpoint_url: str | None = None) -> dict[str, Any]:
        """s3fs storage options for this endpoint (or for a proxy in front of it)."""
        return {
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"endpoint_url": endpoint_url or self.url},
        }

    def env(self) -> dict[str, str]:
        """Environment variables that let another process (a Ray worker) reach this endpoint."""
        return {
            ENDPOINT_ENV: self.url,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", DEFAULT_REGION),
        }

    def to_json(self) -> str:
        """What another process needs to use this endpoint (never its stop function)."""
        return json.dumps(
            {
                "backend": self.backend,
                "url": self.url,
                "key": self.key,
                "secret": self.secret,
                "description": self.description,
                "start_seconds": self.start_seconds,
                "cluster_dir": str(self.cluster_dir) if self.cluster_dir else None,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> S3Endpoint:
        """The endpoint another process started (`to_json`); this process cannot stop it."""
        info = json.loads(text)
        cluster = info.pop("cluster_dir", None)
        cluster_dir = Path(cluster) if cluster else None
        return cls(**info, cluster_dir=cluster_dir)

    def stop(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def choose_backend() -> str:
    """Which backend this session will use: "external", "rgw" or "moto" (see module docstring)."""
    if os.environ.get(ENDPOINT_ENV):
        return "external"
    wanted = os.environ.get(BACKEND_ENV, "").strip().lower()
    if wanted not in ("", "moto", "rgw"):
        raise ValueError(f"{BACKEND_ENV}={wanted!r}: expected 'moto', 'rgw' or unset")
    if wanted == "moto":
        return "moto"
    if wanted == "rgw" or rgw_installed():
        return "rgw"
    return "moto"


def rgw_installed() -> bool:
    return all(shutil.which(tool) for tool in ("radosgw", "radosgw-admin", "ceph-mon", "ceph-osd"))


def start(workdir: Path) -> tuple[S3Endpoint, str | None]:
    """Start the chosen backend; `workdir` holds RGW's cluster and logs.

    Returns the endpoint and, when RGW failed and moto replaced it, a note saying why.
    """
    backend = choose_backend()
    if backend == "external":
        return external(), None
    if backend == "rgw":
        try:
            return start_rgw(workdir), None
        except RuntimeError as err:
            if os.environ.get(BACKEND_ENV, "").strip().lower() == "rgw":
                raise
            return start_moto(), f"Ceph RGW failed to start, fell back to moto: {err}"
    return start_moto(), None


def wait_shared(path: Path, timeout_s: float = SHARED_WAIT_S) -> S3Endpoint:
    """The endpoint the xdist controller started (see `SHARED_ENV`): waits until it has written
    `path`, or raises with what it wrote instead (the reason it could not start)."""
    deadline = time.monotonic() + timeout_s
    failed = path.with_suffix(".failed")
    while time.monotonic() < deadline:
        if path.exists():
            return S3Endpoint.from_json(path.read_text())
        if failed.exists():
            raise RuntimeError(f"the test session's shared S3 endpoint did not start: {failed.read_text()}")
        time.sleep(0.1)
    raise RuntimeError(
        f"the test session's shared S3 endpoint was not ready after {timeout_s:.0f} s ({path})"
    )


def external() -> S3Endpoint:
    url = os.environ[ENDPOINT_ENV]
    key = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise RuntimeError(
            f"{ENDPOINT_ENV}={url} is set but AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not; "
            "export the endpoint's credentials too"
        )
    return S3Endpoint("external", url, key, secret, f"external S3 at {url} (from ${ENDPOINT_ENV})")


def start_rgw(workdir: Path) -> S3Endpoint:
    """Run scripts/s3/start-rgw.sh into `workdir`; RuntimeError (with the log tail) if it fails."""
    started = time.monotonic()
    try:
        proc = subprocess.run(
            ["bash", str(START_RGW), str(workdir)],
            capture_output=True,
            text=True,
            timeout=RGW_START_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as err:
        subprocess.run(["bash", str(STOP_RGW), str(workdir)], check=False)
        raise RuntimeError(f"start-rgw.sh took over {RGW_START_TIMEOUT_S} s; logs in {workdir}/log") from err
    if proc.returncode != 0:
        raise RuntimeError(
            f"start-rgw.sh exited {proc.returncode}; logs in {workdir}/log\n{proc.stdout}{proc.stderr}"
        )
    seconds = time.monotonic() - started
    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in (workdir / "endpoint.env").read_text().splitlines()
        if "=" in line
    )

    def stop() -> None:
        subprocess.run(["bash", str(STOP_RGW), str(workdir)], check=False, timeout=120)

    url = env[ENDPOINT_ENV]
    return S3Endpoint(
        "rgw",
        url,
        env["AWS_ACCESS_KEY_ID"],
        env["AWS_SECRET_ACCESS_KEY"],
        f"Ceph RGW (radosgw) at {url}, started in {seconds:.1f} s; logs in {workdir}/log",
        start_seconds=seconds,
        _stop=stop,
        cluster_dir=workdir,
    )


def start_moto() -> S3Endpoint:
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request at INFO; pytest would paste them all into each failure report.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    started = time.monotonic()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    seconds = time.monotonic() - started
    url = f"http://{host}:{port}"
    return S3Endpoint(
        "moto",
        url,
        MOTO_KEY,
        MOTO_SECRET,
        f"moto ThreadedMotoServer at {url}, started in {seconds:.2f} s (no signature checks)",
        start_seconds=seconds,
        _stop=server.stop,
    )


@contextmanager
def fresh_bucket(options: dict[str, Any], prefix: str = "gl-test") -> Iterator[str]:
    """A new, uniquely named bucket created through s3fs; removed afterwards (best effort)."""
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    name = f"{prefix}-{uuid.uuid4().hex[:16]}"
    fs.mkdir(name)
    try:
        yield name
    finally:
        try:
            fs.invalidate_cache()
            fs.rm(name, recursive=True)
        except Exception:  # noqa: BLE001 - a leftover bucket on a throwaway server is harmless
            pass
