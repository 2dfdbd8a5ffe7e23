"""A counting HTTP reverse proxy on 127.0.0.1, for tests that prove how many requests and bytes a
read costs (e.g. that one window of a multi-MiB shard moves only about a window's bytes).

It forwards method, path, query, headers and body unchanged, including the Host header the client
sent: SigV4 signs the Host header, and the client signed for the proxy's address, so the upstream
(which checks signatures, as RGW does) must see that same Host. Only hop-by-hop headers and
`Expect` (never signed by botocore; the proxy itself answers `100 Continue`) are dropped.

Counts: requests by method, and response *body* bytes sent back to the client (`bytes_out`).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# Hop-by-hop headers (RFC 9110 7.6.1) belong to one connection and are not forwarded.
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
}


class ForwardingHandler(BaseHTTPRequestHandler):
    """The forwarding half of a test proxy, shared by this counting proxy and the fault proxy
    (`tests/infra/faultproxy.py`): read the client's request, send it upstream over one keep-alive
    connection per client connection, and write the reply's status and headers back.
    A subclass sets `upstream` (host, port) and routes the ``do_*`` methods."""

    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    _upstream: http.client.HTTPConnection | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # the proxies' own records are the log; stderr noise would hide test output

    def _read_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length else None

    def _forward_upstream(self, body: bytes | None) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Send this request (its end-to-end headers, ``body``) upstream; the reply, read whole."""
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
        if body is not None and not any(k.lower() == "content-length" for k, _ in headers):
            headers.append(("Content-Length", str(len(body))))
        # One upstream connection per client connection; retry once on a stale keep-alive.
        for attempt in (0, 1):
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
            conn = self._upstream
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for key, value in headers:
                    conn.putheader(key, value)
                conn.endheaders(body)
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    conn.close()
                    self._upstream = None
                return resp.status, resp.reason, resp.getheaders(), data
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _reply_head(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        """Status line and end-to-end headers of a reply whose body is ``body`` (not yet ended)."""
        self.send_response_only(status, reason)
        for key, value in headers:
            if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        if status in (204, 304) or status < 200:
            pass  # these replies never carry a body nor a Content-Length
        elif self.command != "HEAD":
            self.send_header("Content-Length", str(len(body)))
        else:  # a HEAD reply announces the object's length but carries no body
            length = next((v for k, v in headers if k.lower() == "content-length"), None)
            if length is not None:
                self.send_header("Content-Length", length)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass  # the client went away (or a fault reset the connection on purpose)
        if self._upstream is not None:
            self._upstream.close()


@dataclass(frozen=True)
class ProxiedRequest:
    """One request as the proxy saw it. `range` is the raw Range header or None; `bytes` counts
    the response body only."""

    method: str
    path: str
    range: str | None
    status: int
    bytes: int


class WideServer(ThreadingHTTPServer):
    """A threading server whose listen backlog takes a whole burst of concurrent clients.

    socketserver's backlog is 5: on a busy machine the sixth simultaneous connection waits
    for a SYN retry (a second or more), which makes a concurrent client look serial."""

    request_queue_size = 256


class CountingProxy:
    """Forward everything from `url` (http://127.0.0.1:PORT) to `upstream`, counting on the way.

    `requests` is a Counter of method -> number of requests; `bytes_out` the total response body
    bytes; `log` the list of `ProxiedRequest`s in completion order; `reset()` zeroes all three.
    `storage_options` are s3fs options that point at the proxy (the `counting_s3` fixture fills them).
    """

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream_host: str = parts.hostname
        self.upstream_port: int = parts.port
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.bytes_out = 0
        self.log: list[ProxiedRequest] = []
        # Requests being served now, the most at once since the last reset, and an optional
        # pause before forwarding each one (seconds), which makes serial clients visible.
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay_s = 0.0
        # s3fs options that point at this proxy; set by whoever knows the credentials.
        self.storage_options: dict[str, Any] = {}
        self._server = WideServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="s3-counting-proxy", daemon=True
        )

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    @property
    def request_count(self) -> int:
        """All requests of any method since the last reset."""
        with self._lock:
            return sum(self.requests.values())

    def reset(self) -> None:
        with self._lock:
            self.requests = Counter()
            self.bytes_out = 0
            self.log = []
            self.max_in_flight = self.in_flight

    def _record(self, entry: ProxiedRequest) -> None:
        with self._lock:
            self.requests[entry.method] += 1
            self.bytes_out += entry.bytes
            self.log.append(entry)

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _make_handler(proxy: CountingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(ForwardingHandler):
        upstream = (proxy.upstream_host, proxy.upstream_port)

        def _forward(self) -> None:
            proxy._enter()
            try:
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                self._forward_counted()
            finally:
                proxy._leave()

        def _forward_counted(self) -> None:
            status, reason, resp_headers, resp_body = self._forward_upstream(self._read_body())
            self._reply_head(status, reason, resp_headers, resp_body)
            # Count before the client can see the reply, so a test never reads a stale count.
            proxy._record(
                ProxiedRequest(self.command, self.path, self.headers.get("Range"), status, len(resp_body))
            )
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(resp_body)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = _forward

    return Handler
