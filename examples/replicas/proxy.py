#!/usr/bin/env python3
"""A round-robin gateway in front of several serving replicas, for trying a
soak's replica-failure fault plan by hand (docs/real-deployment.md).

It shares no code with sloprober. Like a gateway without retries or health
checks, it sends each request to the next replica in turn: a request sent to
a stopped replica fails with 502. It streams responses (SSE) chunk by
chunk. Its admin API takes a replica out of rotation and puts it back, as a
gateway's admin API would (an http fault action can call it):

    POST /admin/backends/<i>/down    POST /admin/backends/<i>/up
    GET  /admin/backends

Usage: proxy.py --port 8010 http://127.0.0.1:8011 http://127.0.0.1:8012 ...
It listens on 127.0.0.1 only.
"""
import argparse
import http.client
import itertools
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class Backends:
    def __init__(self, urls):
        self.urls = [urllib.parse.urlsplit(u) for u in urls]
        self.down = [False] * len(urls)
        self.served = [0] * len(urls)
        self.failed = [0] * len(urls)
        self.lock = threading.Lock()
        self.turn = itertools.count()

    def pick(self):
        with self.lock:
            n = len(self.urls)
            start = next(self.turn)
            for k in range(n):
                i = (start + k) % n
                if not self.down[i]:
                    self.served[i] += 1
                    return i
        return None

    def state(self):
        with self.lock:
            return [{"index": i, "url": u.geturl(), "down": self.down[i], "served": self.served[i],
                     "failed": self.failed[i]} for i, u in enumerate(self.urls)]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # a first token must not wait for a delayed ACK
    backends = None

    def log_message(self, *args):
        pass

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else None

    def _reply(self, code, obj):
        b = (json.dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def _admin(self, body):
        parts = self.path.strip("/").split("/")
        b = self.backends
        if self.command == "GET" and parts == ["admin", "backends"]:
            return self._reply(200, b.state())
        if self.command == "POST" and len(parts) == 4 and parts[:2] == ["admin", "backends"] and parts[3] in ("down", "up"):
            try:
                i = int(parts[2])
                with b.lock:
                    b.down[i] = parts[3] == "down"
            except (ValueError, IndexError):
                return self._reply(404, {"error": "no backend " + parts[2]})
            return self._reply(200, b.state()[i])
        return self._reply(404, {"error": "unknown admin path"})

    def _proxy(self):
        body = self._body()  # read whole, as gateways do
        if self.path.startswith("/admin/"):
            return self._admin(body)
        i = self.backends.pick()
        if i is None:
            return self._reply(503, {"error": "every backend is down"})
        u = self.backends.urls[i]
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP and k.lower() != "host"}
        try:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as e:
            with self.backends.lock:
                self.backends.failed[i] += 1
            return self._reply(502, {"error": "backend %s: %s" % (u.netloc, e)})
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the stream broke: the client sees it broken
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_DELETE = _proxy


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8010)
    p.add_argument("backends", nargs="+")
    a = p.parse_args()
    Handler.backends = Backends(a.backends)
    # socketserver's listen backlog of 5 drops connections a burst of new
    # streams opens at once; a gateway takes them.
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    print("round robin on 127.0.0.1:%d over %s" % (a.port, ", ".join(a.backends)), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
