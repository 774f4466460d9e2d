#!/usr/bin/env python3
"""A minimal OpenAI-compatible chat server, written apart from sloprober.

sloprober's built-in simulator shares sloprober's assumptions; this server
shares none of its code or language. It has SLOTS slots served first come,
first served (a request waits for a free slot: that wait is its queue),
a prefill of PREFILL_BASE plus PREFILL_PER_WORD a word of the prompt, then
one word a DECODE seconds, streamed as server-sent events, with usage in
the last chunk when the client asks for it (stream_options.include_usage).
It has no /tokenize: sloprober counts a word as a token.

Its capacity follows from those numbers. With the defaults (8 slots,
prefill 20 ms + 0.05 ms a word, decode 5 ms a word), a request of 512
words in and 128 out holds its slot for about 0.69 s: 8 clients complete
about 11.6 req/s closed loop, and Poisson arrivals queue well before that.

    python3 examples/independent-server/server.py --port 18500
    ./sloprober test run --target http://127.0.0.1:18500/v1

Only loopback: it listens on 127.0.0.1 unless told otherwise.
"""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fifo-model"


class Slots:
    """SLOTS slots, taken in arrival order (a ticket queue)."""

    def __init__(self, n):
        self.free = n
        self.next_ticket = 0
        self.serving = 0
        self.cond = threading.Condition()

    def acquire(self):
        with self.cond:
            ticket = self.next_ticket
            self.next_ticket += 1
            while ticket != self.serving or self.free == 0:
                self.cond.wait()
            self.free -= 1
            self.serving += 1
            self.cond.notify_all()

    def release(self):
        with self.cond:
            self.free += 1
            self.cond.notify_all()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked streams
    # TCP_NODELAY, as serving stacks set it: without it, a token written
    # just after the headers waits for the client's delayed ACK (40 ms
    # of TTFT that sloprober measured, and the server's timings would not
    # show).
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet: one line per request is noise
        pass

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/") == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "independent-server"}]})
        else:
            self.send_json(404, {"error": {"message": "not found: " + self.path}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 16 << 20:
            self.close_connection = True  # its body is not read
            self.send_json(413, {"error": {"message": "request too large"}})
            return
        body = self.rfile.read(length)  # read first: on a kept-alive connection the next request follows it
        if self.path != "/v1/chat/completions":
            self.send_json(404, {"error": {"message": "not found: " + self.path}})
            return
        try:
            req = json.loads(body)
            prompt = " ".join(str(m.get("content", "")) for m in req.get("messages", []))
        except (ValueError, AttributeError) as e:
            self.send_json(400, {"error": {"message": "bad request: %s" % e}})
            return
        words_in = len(prompt.split())
        out = int(req.get("max_completion_tokens") or req.get("max_tokens") or 128)
        out = max(1, min(out, 4096))
        stream = bool(req.get("stream"))
        usage_wanted = bool((req.get("stream_options") or {}).get("include_usage"))
        rid = "chatcmpl-%d" % time.monotonic_ns()

        SLOTS.acquire()
        try:
            time.sleep(ARGS.prefill_base + ARGS.prefill_per_word * words_in)
            usage = {"prompt_tokens": words_in, "completion_tokens": out, "total_tokens": words_in + out}
            if not stream:
                time.sleep(ARGS.decode * out)
                self.send_json(200, {"id": rid, "object": "chat.completion", "model": MODEL,
                                     "choices": [{"index": 0, "finish_reason": "length",
                                                  "message": {"role": "assistant", "content": " ".join(["word"] * out)}}],
                                     "usage": usage})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(out):
                if i > 0:
                    time.sleep(ARGS.decode)
                delta = {"content": ("word" if i == 0 else " word")}
                if i == 0:
                    delta["role"] = "assistant"
                self.event({"id": rid, "object": "chat.completion.chunk", "model": MODEL,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            self.event({"id": rid, "object": "chat.completion.chunk", "model": MODEL,
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            if usage_wanted:
                self.event({"id": rid, "object": "chat.completion.chunk", "model": MODEL, "choices": [], "usage": usage})
            self.chunk(b"data: [DONE]\n\n")
            self.chunk(b"")  # the last chunk of the chunked encoding
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left
        finally:
            SLOTS.release()

    def event(self, obj):
        self.chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def main():
    global ARGS, SLOTS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18500)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--prefill-base", type=float, default=0.020, help="seconds")
    p.add_argument("--prefill-per-word", type=float, default=0.00005, help="seconds")
    p.add_argument("--decode", type=float, default=0.005, help="seconds a word")
    ARGS = p.parse_args()
    SLOTS = Slots(ARGS.slots)
    server = ThreadingHTTPServer((ARGS.host, ARGS.port), Handler)
    server.daemon_threads = True
    print("independent server on http://%s:%d/v1: %d slots, prefill %gs + %gs a word, decode %gs a word"
          % (ARGS.host, ARGS.port, ARGS.slots, ARGS.prefill_base, ARGS.prefill_per_word, ARGS.decode), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
