"""A fault-injecting HTTP reverse proxy on 127.0.0.1, for tests of what a client sees when S3
misbehaves: error statuses, connections reset mid-body, truncated bodies, stalls and latency.

It forwards like the counting proxy (`tests/infra/s3proxy.py`: method, path, query, headers and body
unchanged, Host included, so SigV4 signatures still verify upstream) except where a rule says
otherwise. Rules are deterministic: each is matched, in the order given, against the request's
method and path (a regular expression, searched), and fires on the matching requests numbered
``skip`` .. ``skip + times - 1`` (``times=None``: every one from ``skip`` on). Nothing is random,
so a test that fails fails the same way every run. Two more conditions narrow a rule:
``fraction`` (fire on that share of the matching requests, spread evenly: 0.1 is every tenth)
and ``for_s`` (fire only for that many seconds after the rule is armed: made, or `FaultProxy.add`).

The proxy records the requests in flight over time (``in_flight_log``: ``(time.monotonic(),
count)`` at every change; `FaultProxy.peak_in_flight` reads it), as the server sees them, not as
the client claims.

Actions:

* ``status``: answer ``status`` (default 500) with an S3-style XML error body (its ``<Code>`` is
  ``code``, or the usual one for the status; no ``<Message>`` when ``message`` is empty, as some
  servers answer); upstream is not asked.
* ``reset``: forward, send the headers and the first ``keep`` bytes of the body (default half),
  then reset the connection (TCP RST).
* ``truncate``: like ``reset`` but close the connection cleanly after ``keep`` bytes, so the body
  is shorter than its Content-Length.
* ``stall``: read the request and never answer (until the proxy stops, or ``delay`` seconds).
* ``latency``: wait ``delay`` seconds, then forward.
* ``grow``: forward, and append ``extra`` bytes to a successful body (a file that grew).
* ``throttle``: answer the store's "slow down" (after ``delay`` seconds, as a busy server
  would): ``style="s3"`` 503 with an S3 XML body ``<Code>SlowDown</Code>``, ``"gcs"`` 429 with a
  JSON API error body (``rateLimitExceeded``), ``"azure"`` 503 with ``x-ms-error-code:
  ServerBusy``; upstream is not asked.
* ``short``: forward, and send only the first ``keep`` bytes of a successful body (default
  half) as a complete reply: its Content-Length matches what is sent and the connection stays
  healthy, so only the object's checksum header (botocore's response checksum) or a size check
  can tell (a body damaged on its way, as a faulty middlebox or cache would).
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from s3proxy import ForwardingHandler, WideServer

__all__ = ["Fault", "FaultProxy"]

_ACTIONS = ("status", "reset", "truncate", "stall", "latency", "grow", "short", "throttle")
_STYLES = ("s3", "gcs", "azure")


@dataclass
class Fault:
    """One rule: ``action`` on requests whose method matches ``method`` (``"*"``: any) and
    whose path (with query) matches the regular expression ``path``."""

    action: str
    path: str = ""
    method: str = "*"
    status: int = 500
    keep: int | None = None  # body bytes sent before a reset / truncation / short end (None: half)
    delay: float = 0.0  # seconds, for stall (0: until the proxy stops) and latency
    extra: int = 1  # bytes appended by grow
    code: str | None = None  # the S3 error code of a status answer (None: the status's usual one)
    message: str = "injected by the fault proxy"  # its <Message> ("" leaves the element out)
    skip: int = 0  # matching requests let through before the rule fires
    times: int | None = None  # how many matching requests it fires on (None: all)
    style: str = "s3"  # the store whose throttling answer ``throttle`` sends: s3, gcs, azure
    fraction: float = 1.0  # the share of matching requests it fires on (evenly spread)
    for_s: float | None = None  # fire only this many seconds after being armed (None: always)
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)
    armed: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.action not in _ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}; one of {_ACTIONS}")
        if self.style not in _STYLES:
            raise ValueError(f"unknown throttling style {self.style!r}; one of {_STYLES}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        self._pattern = re.compile(self.path)
        self.arm()

    def arm(self) -> None:
        """Start the ``for_s`` window now."""
        self.armed = time.monotonic()

    def claims(self, method: str, path: str) -> bool:
        """Whether this rule fires on this request (counts it; call once per request)."""
        if self.method not in ("*", method) or not self._pattern.search(path):
            return False
        n = self.seen
        self.seen += 1
        if n < self.skip or (self.times is not None and n >= self.skip + self.times):
            return False
        if self.for_s is not None and time.monotonic() >= self.armed + self.for_s:
            return False
        k = n - self.skip  # evenly spread: fire when the running share crosses a whole request
        if int((k + 1) * self.fraction) == int(k * self.fraction):
            return False
        self.fired += 1
        return True


class FaultProxy:
    """Forward ``url`` (http://127.0.0.1:PORT) to ``upstream``, applying ``faults`` on the way.

    ``add(fault)`` / ``clear()`` change the rules while it runs; ``requests`` counts requests by
    method and ``log`` lists ``(method, path, action or "forward")`` in arrival order.
    ``storage_options`` (filled by the fixture) are s3fs options that point at the proxy.
    """

    def __init__(self, upstream: str, faults: list[Fault] | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream_host: str = parts.hostname
        self.upstream_port: int = parts.port
        self.faults: list[Fault] = list(faults or [])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.requests: Counter[str] = Counter()
        self.log: list[tuple[str, str, str]] = []
        self.in_flight = 0
        self.in_flight_log: list[tuple[float, int]] = []
        self.storage_options: dict[str, Any] = {}
        self._server = WideServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            fault.arm()
            self.faults.append(fault)
        return fault

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.in_flight_log.append((time.monotonic(), self.in_flight))

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self.in_flight_log.append((time.monotonic(), self.in_flight))

    def peak_in_flight(self, start: float, end: float) -> int:
        """The most requests in flight at once between the ``time.monotonic()`` instants
        ``start`` and ``end``, from the proxy's own record."""
        with self._lock:
            log = list(self.in_flight_log)
        level, peak = 0, 0
        for when, count in log:
            if when < start:
                level = count
                continue
            if when > end:
                break
            peak = max(peak, count)
        return max(peak, level)

    def clear(self) -> None:
        with self._lock:
            self.faults = []

    def _choose(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests[method] += 1
            chosen = next((f for f in self.faults if f.claims(method, path)), None)
            self.log.append((method, path, chosen.action if chosen else "forward"))
            return chosen

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases stalled handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_ERROR_BODY = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>{message}</Error>'
_CODES = {500: "InternalError", 503: "SlowDown", 403: "AccessDenied", 404: "NoSuchKey"}


def _make_handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(ForwardingHandler):
        upstream = (proxy.upstream_host, proxy.upstream_port)

        def _handle(self) -> None:
            proxy._enter()
            try:
                self._handle_counted()
            finally:
                proxy._leave()

        def _handle_counted(self) -> None:
            body = self._read_body()
            fault = proxy._choose(self.command, self.path)
            action = fault.action if fault else "forward"
            if fault is not None and action == "stall":
                proxy._stopping.wait(fault.delay or None)
                self.close_connection = True
                return
            if fault is not None and action == "status":
                code = fault.code or _CODES.get(fault.status, "InjectedError")
                message = f"<Message>{fault.message}</Message>" if fault.message else ""
                payload = _ERROR_BODY.format(code=code, message=message).encode()
                self.send_response_only(fault.status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                return
            if fault is not None and action == "throttle":
                if fault.delay and proxy._stopping.wait(fault.delay):
                    return
                self._throttle(fault.style)
                return
            if fault is not None and action == "latency":
                if proxy._stopping.wait(fault.delay):
                    return
            status, reason, resp_headers, data = self._forward_upstream(body)
            if fault is not None and action == "grow" and 200 <= status < 300:
                data += b"\0" * fault.extra
                resp_headers = [(k, v) for k, v in resp_headers if k.lower() != "content-range"]
            if fault is not None and action == "short" and 200 <= status < 300 and self.command != "HEAD":
                data = data[: len(data) // 2 if fault.keep is None else min(fault.keep, len(data))]
            self._reply_head(status, reason, resp_headers, data)
            self.end_headers()
            if self.command == "HEAD":
                return
            if fault is not None and action in ("reset", "truncate"):
                keep = len(data) // 2 if fault.keep is None else min(fault.keep, len(data))
                self.wfile.write(data[:keep])
                self.wfile.flush()
                if action == "reset":  # SO_LINGER 0: close() sends RST instead of FIN
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                return
            self.wfile.write(data)

        def _throttle(self, style: str) -> None:
            """The store's own "slow down" answer."""
            if style == "gcs":
                status, kind = 429, "application/json"
                payload = (
                    b'{"error": {"code": 429, "message": "The rate of change requests to the '
                    b'bucket is too high (injected by the fault proxy)", "errors": [{"reason": '
                    b'"rateLimitExceeded"}]}}'
                )
                extra: list[tuple[str, str]] = []
            elif style == "azure":
                status, kind = 503, "application/xml"
                payload = _ERROR_BODY.format(
                    code="ServerBusy", message="<Message>The server is busy (injected).</Message>"
                ).encode()
                extra = [("x-ms-error-code", "ServerBusy")]
            else:
                status, kind = 503, "application/xml"
                payload = _ERROR_BODY.format(
                    code="SlowDown", message="<Message>Please reduce your request rate.</Message>"
                ).encode()
                extra = []
            self.send_response_only(status)
            self.send_header("Content-Type", kind)
            for key, value in extra:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else 0))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = _handle

    return Handler


def wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    """Poll ``predicate()`` until true or ``timeout`` seconds pass (for tests)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
