"""The GCS and Azure emulators start on a port of their own even when another server of the
suite took the port picked for them (CI once ran the Azure tests against Ceph RGW, which binds
the port it picked about 12 s after picking it)."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import objectstores
import pytest


class _Other(http.server.BaseHTTPRequestHandler):
    """Another server: answers every request, and is not an emulator."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"<Error><Code>InvalidArgument</Code></Error>"
        self.send_response(400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def taken_port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Other)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("store", ["gcs", "azure"])
def test_an_emulator_whose_port_was_taken_starts_on_another(
    store: str, taken_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    picked = [taken_port]  # the first port handed out is the other server's, then free ones

    def free_port() -> int:
        if picked:
            return picked.pop()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    monkeypatch.setattr(objectstores, "_free_port", free_port)
    try:
        endpoint = objectstores.STARTERS[store](tmp_path)
    except objectstores.Unavailable as err:
        pytest.skip(str(err))
    try:
        assert not picked  # the taken port was tried first
        assert endpoint.url != f"http://127.0.0.1:{taken_port}"
        fs = objectstores.filesystem(endpoint)  # and the emulator answers there
        fs.mkdir("gl-ports")
        fs.pipe_file("gl-ports/x.bin", b"abc")
        assert fs.cat_file("gl-ports/x.bin") == b"abc"
    finally:
        endpoint.stop()
