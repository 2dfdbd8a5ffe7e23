"""Ports for a Ray cluster started by hand: free ones to pass to ``ray start``, a check that the
ones chosen are free (Ray itself reports a busy head port as ``AssertionError: Session name ...
does not match persisted value``, which never names the port), and a wait for a node's health
URL. Used by the cluster steps of ``docs/ingestion-with-ray.md``::

    python -m guideloom.workers.ports 5              # five free ports on 127.0.0.1, one line
    python -m guideloom.workers.ports --check 6379 8265
    python -m guideloom.workers.ports --wait http://127.0.0.1:8265/api/gcs_healthz
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.request

__all__ = ["busy", "check", "free_ports", "main", "wait_healthy"]

WAIT_TIMEOUT_S = 120.0


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports that nothing listens on now (the system's choice)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def busy(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` cannot be bound on ``host`` (something listens there)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def check(ports: list[int], host: str = "127.0.0.1") -> str | None:
    """None when every port is free, else a message naming the busy ones and the fix."""
    taken = [p for p in ports if busy(p, host)]
    if not taken:
        return None
    names = ", ".join(str(p) for p in taken)
    return (
        f"port {names} on {host} is in use (another Ray, or another program): a Ray head started "
        f"there fails with Ray's 'Session name ... does not match persisted value'. Choose free "
        f"ports with `python -m guideloom.workers.ports {len(ports)}` and pass them to `ray start` "
        "(--port, --dashboard-port, --ray-client-server-port, --dashboard-agent-listen-port)"
    )


def wait_healthy(url: str, timeout_s: float = WAIT_TIMEOUT_S) -> str | None:
    """Poll ``url`` until it answers 200; None then, else a message after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return None
        except OSError:
            pass
        if time.monotonic() > deadline:
            return f"{url} did not answer within {timeout_s:.0f} s: see the node's log (ray start's output)"
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    """The command line (see the module's docstring); 0 when all is well, 1 with a message."""
    if argv[:1] == ["--check"]:
        problem = check([int(a) for a in argv[1:]])
    elif argv[:1] == ["--wait"] and len(argv) == 2:
        problem = wait_healthy(argv[1])
    elif len(argv) == 1 and argv[0].isdigit():
        print(" ".join(str(p) for p in free_ports(int(argv[0]))))
        return 0
    else:
        problem = "usage: python -m guideloom.workers.ports N | --check PORT... | --wait URL"
    if problem:
        print(f"guideloom.workers.ports: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
