#!/usr/bin/env python3
"""tools/stream_latency.py — streaming latency per token of aahd: from the engine's publication of a token to its
bytes on the client's socket, p50 and p99 over N concurrent streams (docs/bench/2026-12-07-streaming-latency.md).

It starts aahd itself with AAHD_WAKE_TRACE=FILE (server/http.c: every engine notification, which the engine thread
makes right after it sampled and published a token, is stamped with CLOCK_REALTIME and the request's id), opens
--streams connections at once, each POST /v1/completions with "stream": true, "ignore_eos": true, "logprobs": 0 and
its own X-Request-Id, and stamps every received segment with the kernel's receive time (SO_TIMESTAMPNS, also
CLOCK_REALTIME: one clock, one machine). The k-th notification of a one-choice request is its k-th token (the engine
publishes once per step that gives it a token, and its last token comes with the end's notification); the logprobs
object of each SSE event says how many tokens it carries, so token k is matched to the event that brought it. After
--rounds rounds it stops aahd (SIGTERM: the trace is written) and prints the percentiles.

usage: tools/stream_latency.py [--aahd build/aahd] [--model tests/data/qwen3-small-a] [--streams 64] [--tokens 64]
                               [--rounds 3] [--threads 1] [--json OUT]
"""
import argparse
import json
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def start_aahd(args, trace):
    """aahd on a free port, its log in a file (a pipe nobody reads would stall it); returns (proc, port, log path)."""
    env = dict(os.environ, AAHD_WAKE_TRACE=trace)
    cmd = [args.aahd, "--model", args.model, "--port", "0", "--threads", str(args.threads),
           "--max-batch", str(max(8, args.streams)), "--queue-length", str(max(64, 2 * args.streams))]
    log_path = trace + ".log"
    log_f = open(log_path, "w")
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_f)
    log_f.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(log_path) as f:
            log = f.read()
        m = re.search(r"listening on http://\S*:(\d+)", log)
        if m:
            return proc, int(m.group(1)), log_path
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    sys.exit(f"stream_latency: aahd did not start:\n{log}")


class Stream:
    """One streamed request: its socket, the de-chunked SSE text, and (kernel time, tokens) per event."""

    def __init__(self, port, rid, body):
        self.rid = rid
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"X-Request-Id: {rid}\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
        self.sock.sendall(req)
        self.sock.setblocking(False)
        self.raw = b""          # bytes not yet de-chunked
        self.head_done = False
        self.chunked = False
        self.sse = b""          # de-chunked body not yet split into events
        self.events = []        # (kernel ns, client ns, tokens in the event)
        self.done = False
        self.status = None

    def on_readable(self, seen_ns):
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(16))
            except BlockingIOError:
                return
            if not data:
                self.done = True
                return
            kern = seen_ns
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = struct.unpack("qq", cdata[:16])
                    kern = sec * 1000000000 + nsec
            self.feed(data, kern, seen_ns)

    def feed(self, data, kern, seen):
        self.raw += data
        if not self.head_done:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.raw[:end].decode("latin-1")
            self.status = int(head.split(" ", 2)[1])
            self.chunked = "transfer-encoding: chunked" in head.lower()
            self.raw = self.raw[end + 4:]
            self.head_done = True
        if self.chunked:
            while True:
                nl = self.raw.find(b"\r\n")
                if nl < 0:
                    break
                size = int(self.raw[:nl].split(b";")[0], 16)
                if len(self.raw) < nl + 2 + size + 2:
                    break
                self.sse += self.raw[nl + 2:nl + 2 + size]
                self.raw = self.raw[nl + 2 + size + 2:]
                if size == 0:
                    self.done = True
        else:
            self.sse, self.raw = self.sse + self.raw, b""
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                break
            ev, self.sse = self.sse[:end], self.sse[end + 2:]
            for line in ev.split(b"\n"):
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                n = 0
                for ch in obj.get("choices", []):
                    lp = ch.get("logprobs")
                    if lp and lp.get("tokens"):
                        n += len(lp["tokens"])
                if n:
                    self.events.append((kern, seen, n))


def run_round(port, args, rnd):
    body = json.dumps({"prompt": "The Python interpreter", "max_tokens": args.tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0.8, "seed": 7, "logprobs": 0}).encode()
    sel = selectors.DefaultSelector()
    streams = []
    for i in range(args.streams):
        s = Stream(port, f"lat{rnd}x{i}", body)
        streams.append(s)
        sel.register(s.sock, selectors.EVENT_READ, s)
    left, deadline = len(streams), time.time() + 120
    while left and time.time() < deadline:
        ready = sel.select(timeout=1.0)
        seen = time.clock_gettime_ns(time.CLOCK_REALTIME)
        for key, _ in ready:
            s = key.data
            s.on_readable(seen)
            if s.done:
                sel.unregister(s.sock)
                s.sock.close()
                left -= 1
    for s in streams:
        if not s.done:
            s.sock.close()
    return streams


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aahd", default=os.environ.get("AAH_BUILD", "build") + "/aahd")
    ap.add_argument("--model", default="tests/data/qwen3-small-a")
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write every latency sample here")
    args = ap.parse_args()

    trace = tempfile.NamedTemporaryFile(prefix="aahd-wake-", suffix=".txt", delete=False).name
    proc, port, log_path = start_aahd(args, trace)
    all_streams = []
    t0 = time.time()
    try:
        for r in range(args.rounds):
            all_streams += run_round(port, args, r)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    wall = time.time() - t0

    wakes = {}
    with open(trace) as f:
        for line in f:
            rid, ns = line.split()
            wakes.setdefault(rid, []).append(int(ns))
    os.unlink(trace)
    os.unlink(log_path)

    kern_lat, seen_lat, bad, tokens = [], [], 0, 0
    for s in all_streams:
        w = sorted(wakes.get(s.rid, []))
        n_tok = sum(n for _, _, n in s.events)
        if s.status != 200 or n_tok != args.tokens or len(w) != n_tok:
            print(f"stream_latency: {s.rid} not measured: status {s.status}, {n_tok} tokens received, "
                  f"{len(w)} notifications", file=sys.stderr)
            bad += 1
            continue
        k = 0
        for kern, seen, n in s.events:
            for _ in range(n):
                kern_lat.append((kern - w[k]) / 1e6)
                seen_lat.append((seen - w[k]) / 1e6)
                k += 1
        tokens += n_tok
    res = {
        "streams": args.streams, "tokens_per_stream": args.tokens, "rounds": args.rounds,
        "streams_measured": len(all_streams) - bad, "streams_unmatched": bad, "tokens": tokens,
        "wall_s": round(wall, 2), "load1": os.getloadavg()[0],
        "socket_ms": {"p50": pct(kern_lat, 50), "p90": pct(kern_lat, 90), "p99": pct(kern_lat, 99),
                      "max": max(kern_lat) if kern_lat else float("nan")},
        "client_ms": {"p50": pct(seen_lat, 50), "p99": pct(seen_lat, 99)},
    }
    print(json.dumps(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": res, "socket_ms": kern_lat}, f)
    # a stream whose notifications do not match its tokens one for one is left out and counted (the engine can
    # run a lone first request ahead of its handler's attaching to the job: those tokens were never notified)
    return 0 if tokens > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
