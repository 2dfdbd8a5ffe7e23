"""The GCS and Azure Blob endpoints the test session runs against: local emulators on 127.0.0.1.

* GCS: PyPI ``gcp-storage-emulator`` (pure Python, installed with ``guideloom[dev]``), started as
  a subprocess in memory, reached through ``gcsfs`` with ``endpoint_url=`` and ``token="anon"``.
  ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false`` is set before gcsfs is imported: otherwise each
  bucket costs a 60 s gRPC probe against the emulator.
* Azure Blob: npm ``azurite@3.35.0`` (3.37 needs Node 22), started from ``AZURITE_BIN``, from
  ``$PATH`` or from ``~/.cache/guideloom-azurite`` (``make system-packages`` installs it there, best
  effort), always with ``--disableTelemetry --skipApiVersionCheck`` and bound to 127.0.0.1 (without
  ``--disableTelemetry`` it reaches an outside endpoint; a test never sends traffic anywhere but
  the loopback). Reached through ``adlfs`` with the development-storage connection string.

Each ``start_*`` returns an `Endpoint`, or raises `Unavailable` with one line saying how to get
the emulator (the fixtures turn that into a skip).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

AZURITE_VERSION = "3.35.0"
AZURITE_CACHE = Path.home() / ".cache" / "guideloom-azurite"
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
GET_AZURITE = (
    f"npm install --prefix {AZURITE_CACHE} azurite@{AZURITE_VERSION} (needs Node 20+), or set AZURITE_BIN"
)
GET_GCS = "pip install gcsfs gcp-storage-emulator (both in guideloom[dev])"


class Unavailable(RuntimeError):
    """The emulator (or its client library) is not installed here; the message says how to get it."""


@dataclass
class Endpoint:
    """A running emulator: ``url`` is ``http://127.0.0.1:PORT``; ``stop()`` ends it."""

    store: str  # "gcs" or "azure"
    url: str
    description: str
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def storage_options(self, url: str | None = None) -> dict[str, Any]:
        """fsspec options for this emulator (or for a proxy at ``url`` in front of it)."""
        target = url or self.url
        if self.store == "gcs":
            return {"endpoint_url": target, "token": "anon", "project": "guideloom-test"}
        return {"connection_string": azure_connection_string(target), "account_name": AZURE_ACCOUNT}

    def env(self) -> dict[str, str]:
        """Variables that let another process reach this emulator with no options given."""
        if self.store == "gcs":
            return {"STORAGE_EMULATOR_HOST": self.url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        return {"AZURE_STORAGE_CONNECTION_STRING": azure_connection_string(self.url)}

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def azure_connection_string(url: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
        f"BlobEndpoint={url}/{AZURE_ACCOUNT};"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(
    port: int, process: subprocess.Popen[bytes], what: str, log: Path, timeout: float
) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            raise Unavailable(f"{what} exited at start (code {process.returncode}); see {log}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise Unavailable(f"{what} did not listen on 127.0.0.1:{port} within {timeout:g} s; see {log}")


def _answer(url: str) -> tuple[dict[str, str], bytes]:
    """The headers and the start of the body of a GET of ``url`` (an error status included)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(response.headers), response.read(512)
    except urllib.error.HTTPError as err:
        return dict(err.headers), err.read(512)


PORT_ATTEMPTS = 3


def _start_on_free_port(
    what: str,
    log: Path,
    timeout: float,
    launch: Callable[[int], subprocess.Popen[bytes]],
    ours: Callable[[str], bool],
) -> tuple[int, subprocess.Popen[bytes]]:
    """Start a server with ``launch(port)`` on a port that was free a moment before, and check
    that what answers there is that server (``ours(url)``). Other servers of the suite pick their
    ports the same way, and one may bind the port first (CI once had azurite start on the port
    Ceph RGW had picked 12 s before binding it; RGW now binds port 0). Then ours exits at start
    while the other one answers a check that the port listens. So the answer is checked, and the
    server is started again on another port (at most `PORT_ATTEMPTS` times)."""
    for _ in range(PORT_ATTEMPTS):
        port = _free_port()
        process = launch(port)  # (an OSError here, a command that cannot run, is the caller's)
        try:
            _wait_listening(port, process, what, log, timeout)
            if ours(f"http://127.0.0.1:{port}") and process.poll() is None:
                return port, process
        except (Unavailable, OSError, ValueError, http.client.HTTPException):
            pass  # (what answered was not the server, or not yet: another port)
        process.kill()
        process.wait()
    raise Unavailable(f"{what} did not answer on a port of its own in {PORT_ATTEMPTS} attempts; see {log}")


def start_gcs(workdir: Path) -> Endpoint:
    """gcp-storage-emulator in memory, in a subprocess (so it does not share the tests' GIL)."""
    try:
        import gcp_storage_emulator  # noqa: F401
        import gcsfs  # noqa: F401
    except ImportError as err:
        raise Unavailable(f"GCS tests skipped: {err.name} is not installed; {GET_GCS}") from None
    log = workdir / "gcs-emulator.log"
    started = time.monotonic()
    # The emulator serves one request at a time from an HTTPServer whose listen backlog is
    # socketserver's 5: a batch of concurrent ranges then has connections dropped at SYN and
    # retried by the kernel a second later (every batch took 1 s). A backlog of 256 queues them.
    boot = (
        "import http.server, sys; http.server.HTTPServer.request_queue_size = 256; "
        "from gcp_storage_emulator.__main__ import main; main(sys.argv[1:])"
    )

    def launch(port: int) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                [sys.executable, "-c", boot, "start", "--host", "127.0.0.1"]
                + ["--port", str(port), "--in-memory", "--quiet"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ours(url: str) -> bool:  # the emulator lists buckets as JSON
        return (
            json.loads(_answer(f"{url}/storage/v1/b?project=p")[1] or b"{}").get("kind") == "storage#buckets"
        )

    port, process = _start_on_free_port("gcp-storage-emulator", log, 30, launch, ours)
    took = time.monotonic() - started
    return Endpoint(
        "gcs",
        f"http://127.0.0.1:{port}",
        f"gcp-storage-emulator (in memory), started in {took:.2f} s",
        process,
    )


def azurite_command() -> list[str] | None:
    """How to run azurite-blob here, or None when it is not installed."""
    given = os.environ.get("AZURITE_BIN")
    if given:
        return [given]
    found = shutil.which("azurite-blob")
    if found:
        return [found]
    cached = AZURITE_CACHE / "node_modules" / ".bin" / "azurite-blob"
    if cached.exists() and shutil.which("node"):
        return [str(cached)]
    return None


def start_azure(workdir: Path) -> Endpoint:
    """azurite-blob, loopback only, no telemetry, its data in memory (its debug log in ``workdir``)."""
    try:
        import adlfs  # noqa: F401
    except ImportError:
        raise Unavailable("Azure tests skipped: adlfs is not installed; pip install adlfs") from None
    command = azurite_command()
    if command is None:
        raise Unavailable(f"Azure tests skipped: azurite is not installed; {GET_AZURITE}")
    log = workdir / "azurite.log"
    started = time.monotonic()

    def launch(port: int) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                command
                + ["--blobHost", "127.0.0.1", "--blobPort", str(port)]
                + ["--disableTelemetry", "--skipApiVersionCheck", "--silent", "--inMemoryPersistence"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def ours(url: str) -> bool:  # azurite names itself in every answer's Server header
        return _answer(f"{url}/{AZURE_ACCOUNT}?comp=list")[0].get("Server", "").startswith("Azurite")

    try:
        port, process = _start_on_free_port("azurite", log, 60, launch, ours)
    except OSError as err:  # the command cannot run at all (Popen's error; not retried)
        raise Unavailable(f"Azure tests skipped: cannot run {command[0]} ({err}); {GET_AZURITE}") from None
    took = time.monotonic() - started
    return Endpoint(
        "azure", f"http://127.0.0.1:{port}", f"azurite {AZURITE_VERSION}, started in {took:.2f} s", process
    )


def filesystem(endpoint: Endpoint) -> Any:
    """A fresh fsspec filesystem for ``endpoint`` (set-up and checks go through it, not GuideLoom)."""
    import fsspec

    protocol = "gs" if endpoint.store == "gcs" else "az"
    return fsspec.filesystem(protocol, skip_instance_cache=True, **endpoint.storage_options())


@contextmanager
def fresh_bucket(endpoint: Endpoint) -> Iterator[str]:
    """A new, empty bucket (GCS) or container (Azure); removed afterwards, best effort."""
    fs = filesystem(endpoint)
    name = f"gl-test-{uuid.uuid4().hex[:16]}"
    fs.mkdir(name)
    try:
        yield name
    finally:
        try:
            fs.rm(name, recursive=True)
        except Exception:  # best effort: the emulator is thrown away with the session anyway
            pass


Starter = Callable[[Path], Endpoint]
STARTERS: dict[str, Starter] = {"gcs": start_gcs, "azure": start_azure}
