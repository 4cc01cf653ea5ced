"""The browser page of a TrainingProgressMonitor: live charts and a Stop button.

Served by worker 1 from a thread, on 127.0.0.1 only, to requests that carry the run's
token (``?token=...`` or the ``X-Spmdlab-Token`` header; anything else gets 403):

- ``GET /``: the page. uPlot (MIT, vendored in ``static/``) is inlined into it, so it
  works offline and nothing is read from disk after start;
- ``GET /data?since=N``: the metric records from the N-th on, the latest values, the
  information, progress, status, and whether the run asked to stop or has ended;
- ``POST /stop``: a person's request to stop, the same as Ctrl-C.

Every other path is 404. ``close()`` lets a page that is watching fetch the final state
(for at most two seconds), then stops the server.
"""

import hmac
import json
import math
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_STATIC = os.path.join(os.path.dirname(__file__), "static")
_LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _page():
    def read(name):
        with open(os.path.join(_STATIC, name), encoding="utf-8") as f:
            return f.read()

    return read("monitor.html").replace("/*UPLOT_CSS*/", read("uPlot.min.css")).replace(
        "/*UPLOT_JS*/", read("uPlot.iife.min.js")).encode()


def _finite(value):
    """JSON has no NaN or infinity: they travel as null (a gap in the chart)."""
    return value if isinstance(value, str) or math.isfinite(value) else None


class WebMonitor:
    """Serve ``state(since)`` of a monitor; ``on_stop()`` when a person presses Stop."""

    def __init__(self, state, on_stop, port=0):
        self.state, self.on_stop = state, on_stop
        self.token = secrets.token_urlsafe(18)
        self.page = _page()
        self.closed = False
        self._last_poll = 0.0
        self._saw_end = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", int(port)), _handler(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/?token={self.token}"
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       name="spmdlab-monitor-web", daemon=True)
        self.thread.start()

    def data(self, since):
        self._last_poll = time.monotonic()
        d = self.state(since)
        d["records"] = [[step, {k: _finite(v) for k, v in values.items()}]
                        for step, values in d["records"]]
        d["latest"] = [[k, _finite(v)] for k, v in d["latest"]]
        d["closed"] = self.closed
        if self.closed:
            self._saw_end.set()
        return json.dumps(d).encode()

    def close(self):
        """Stop serving; a page polled in the last 3 s first gets the final state."""
        if self.closed:
            return
        self.closed = True
        if time.monotonic() - self._last_poll < 3.0:
            self._saw_end.wait(2.0)
        self.server.shutdown()
        self.server.server_close()


def _handler(web):
    class Handler(BaseHTTPRequestHandler):
        server_version = "spmdlab-monitor"
        sys_version = ""

        def log_message(self, format, *args):  # a person's terminal is the monitor's
            pass

        def _reply(self, status, body, kind="text/plain; charset=utf-8"):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Content-Type-Options", "nosniff")
            self.send_header("Referrer-Policy", "no-referrer")
            self.send_header("Content-Security-Policy",
                             "default-src 'none'; script-src 'unsafe-inline'; "
                             "style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
            self.end_headers()
            self.wfile.write(body)

        def _allowed(self, url):
            host = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            if host not in _LOCAL_NAMES:  # a page of another site resolving to us
                return False
            given = parse_qs(url.query).get("token", [""])[0] or \
                self.headers.get("X-Spmdlab-Token", "")
            return hmac.compare_digest(given.encode(), web.token.encode())

        def _route(self, method):
            url = urlsplit(self.path)
            if not self._allowed(url):
                return self._reply(403, b"forbidden: open the address with the token that "
                                        b"worker 1 printed (monitor: http://...)\n")
            if method == "GET" and url.path == "/":
                return self._reply(200, web.page, "text/html; charset=utf-8")
            if method == "GET" and url.path == "/data":
                try:
                    since = max(0, int(parse_qs(url.query).get("since", ["0"])[0]))
                except ValueError:
                    return self._reply(400, b"since must be a whole number\n")
                return self._reply(200, web.data(since), "application/json")
            if method == "POST" and url.path == "/stop":
                web.on_stop()
                return self._reply(200, b'{"stop": true}', "application/json")
            if url.path in ("/", "/data", "/stop"):
                return self._reply(405, b"method not allowed\n")
            return self._reply(404, b"not found\n")

        def do_GET(self):
            self._route("GET")

        def do_POST(self):
            self._route("POST")

    return Handler
