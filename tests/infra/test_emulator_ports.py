"""The GCS and Azure emulators, and Ceph RGW, serve on a port of their own even when another
server of the suite took the port picked for them (CI once ran the Azure tests against Ceph RGW,
which then bound the port it had picked about 12 s before)."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import objectstores
import pytest
import s3server


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
    free = objectstores._free_port

    def free_port() -> int:
        return picked.pop() if picked else free()

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


def test_radosgw_takes_its_port_as_it_binds_and_refuses_a_port_in_use(
    taken_port: int, tmp_path: Path
) -> None:
    # scripts/s3/start-rgw.sh no longer picks radosgw's port ahead of time (about 10 s before
    # radosgw binds it, time enough for another server to take it): radosgw binds port 0 and
    # the script reads back the port it got; every S3 test of the suite runs against that.
    # A port asked for with GUIDELOOM_RGW_PORT that another server holds is refused at once,
    # before anything starts, naming the fix.
    script = s3server.START_RGW.read_text(encoding="utf-8")
    assert 'RGW_PORT="${GUIDELOOM_RGW_PORT:-0}"' in script
    assert "beast endpoint=127.0.0.1:$RGW_PORT" in script
    cluster = tmp_path / "rgw"
    run = subprocess.run(
        ["bash", str(s3server.START_RGW), str(cluster)],
        env={**os.environ, "GUIDELOOM_RGW_PORT": str(taken_port)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if "not found; install Debian's radosgw" in run.stderr:
        pytest.skip("Ceph RGW is not installed (apt-get install radosgw ceph-mon ceph-osd)")
    assert run.returncode == 1
    assert f"GUIDELOOM_RGW_PORT={taken_port}: 127.0.0.1:{taken_port} is in use" in run.stderr
    assert "unset GUIDELOOM_RGW_PORT (radosgw then takes a free one)" in run.stderr
    assert not (cluster / "ceph.conf").exists()  # nothing was started
