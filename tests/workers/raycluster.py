"""A real multi-node Ray cluster on this machine, for the tests: a head and worker nodes, each a
``ray start --block`` process group of its own (separate raylets), with the dashboard and Jobs
API on. It has its own temp dir and ports, so a bare ``ray.init()`` elsewhere (another test
session, another engineer's Ray) never finds it, and it is stopped by its own processes, never
by ``ray stop`` (which stops every Ray on the machine).

The node commands are the ones docker-compose.yml runs (see ``from_compose``), with the host
names replaced by 127.0.0.1 and the ports by free ones.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
START_TIMEOUT_S = 120


def compose_job(services: dict) -> tuple[list[str], list[str]]:
    """The compose ingest service's command as (`ray job submit ...`, `guideloom ingest ...`)."""
    command = services["ingest"]["command"]
    split = command.index("--")
    return command[:split], command[split + 1 :]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``--flag=value`` (replaced where present, appended otherwise)."""
    out = [a for a in argv if not re.match(rf"{re.escape(flag)}(=|$)", a)]
    block = out.index("--block") if "--block" in out else len(out)
    return [*out[:block], f"{flag}={value}", *out[block:]]


class LocalCluster:
    """``head_argv`` / ``worker_argv``: compose's ``ray start`` commands (ports rewritten here)."""

    def __init__(self, head_argv: list[str], worker_argv: list[str], env: dict[str, str], cpus: int = 1):
        self.tmp = Path(tempfile.mkdtemp(prefix="gl-ray-"))  # short: Unix socket paths < 108 bytes
        self.temp_dir = self.tmp / "ray"
        self.gcs_port, self.dashboard_port, client_port, *self._agent_ports = free_ports(6)
        self.gcs_address = f"127.0.0.1:{self.gcs_port}"
        self.dashboard_url = f"http://127.0.0.1:{self.dashboard_port}"
        self.env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
        self.env.update(
            RAY_AUTH_MODE="disabled",
            PYTHONPATH=str(REPO),
            PATH=f"{BIN}{os.pathsep}{self.env.get('PATH', '')}",
        )
        self.cpus = cpus
        head = [str(BIN / "ray"), *head_argv[1:]]
        for flag, value in (
            ("--port", str(self.gcs_port)),
            ("--dashboard-port", str(self.dashboard_port)),
            ("--dashboard-host", "127.0.0.1"),
            ("--num-cpus", str(cpus)),
            ("--temp-dir", str(self.temp_dir)),
            ("--ray-client-server-port", str(client_port)),
            ("--dashboard-agent-listen-port", str(self._agent_ports.pop())),
            ("--object-store-memory", str(256 * 2**20)),
            ("--include-dashboard", "true"),
            ("--disable-usage-stats", ""),
        ):
            head = _set_flag(head, flag, value)
        self.head_argv = [a.rstrip("=") for a in head]
        worker = [str(BIN / "ray"), *worker_argv[1:]]
        worker = [re.sub(r"--address=[^:]+:\d+", f"--address={self.gcs_address}", a) for a in worker]
        self.worker_argv = _set_flag(worker, "--num-cpus", str(cpus))
        self.worker_argv = _set_flag(self.worker_argv, "--object-store-memory", str(256 * 2**20))
        self.head: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.tmp / log).open("ab") as out:
            return subprocess.Popen(
                argv, env=self.env, cwd=self.tmp, stdout=out, stderr=out, start_new_session=True
            )

    def _wait(self, url: str, proc: subprocess.Popen[bytes], log: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while _get(url) != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{url} not healthy: {(self.tmp / log).read_text()[-3000:]}")
            time.sleep(0.5)

    def start(self) -> LocalCluster:
        self.head = self._spawn(self.head_argv, "head.log")
        self._wait(f"{self.dashboard_url}/api/gcs_healthz", self.head, "head.log")  # compose's check
        self.add_worker()
        return self

    def add_worker(self) -> None:
        port = self._agent_ports.pop()
        argv = _set_flag(self.worker_argv, "--dashboard-agent-listen-port", str(port))
        log = f"worker{len(self.workers)}.log"
        proc = self._spawn(argv, log)
        self.workers.append(proc)
        self._wait(f"http://127.0.0.1:{port}/api/local_raylet_healthz", proc, log)  # compose's check

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill_worker(self, i: int = 0) -> None:
        """Kill worker node ``i`` (its raylet and every process of it) at once, like a lost node."""
        self._kill(self.workers[i], signal.SIGKILL)
        self.workers[i].wait(timeout=30)

    def stop(self) -> None:
        procs = [p for p in [*self.workers, self.head] if p is not None]
        for p in procs:
            self._kill(p, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            self._kill(p, signal.SIGKILL)  # the raylets and agents of the group, whatever is left
            p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)
