#!/usr/bin/env python3
"""Loopback HTTP server for the provider specs and benchmarks.

    python3 llm_server.py DIR

Listens on 127.0.0.1 (or $LLM_SERVER_HOST; a free port) and prints "PORT <n>" on stdout. Each request
takes the first entry of DIR/script.json (a JSON list, written back without it; the
last entry is reused once the list has one left) and answers with it; each request
(method, path, headers with lower-cased names, body) is appended as one JSON line to
DIR/requests.jsonl before the answer starts.

A script entry:
  status        HTTP status (200)
  headers       extra response headers
  fixture       file under spec/fixtures/stream/ sent as the body
  body          the body as a string (instead of fixture)
  synth         {"kind": "anthropic", "bytes": N, "delta": n}: a generated text stream;
                {"kind": "anthropic_tool", "bytes": N, "delta": n}: one `write` tool use whose
                input {"path": "big.txt", "content": "..."} is N bytes of JSON on one line,
                in input_json_delta pieces of n bytes ("piece": s: the content is s repeated,
                s being JSON string text, escapes allowed)
  gen           {"head": s, "piece": p, "count": N, "tail": t}: a generated body: s, then p
                N times (count omitted: without end, as fast as the client reads, until
                it goes away), then t; "{n}" in p is replaced by the piece's number (0-based)
  content_type  (text/event-stream for fixtures and synth, else application/json)
  chunk_seed    split the body at random boundaries (seeded), one write + flush each
  max_chunk     largest random chunk (64)
  pieces        the body as a list of strings, each sent as one chunk (one write +
                flush; with delay_ms, each its own read on the client's side)
  delay_ms      sleep between chunks
  truncate_at   send only this many body bytes, then drop the connection
  hang_ms       after the body (or the truncation point), keep the connection this long
  no_chunked    answer with Content-Length instead of chunked encoding
"""
import json
import os
import random
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "spec", "fixtures", "stream")
DIR = sys.argv[1]
LOCK = threading.Lock()


def next_entry():
    path = os.path.join(DIR, "script.json")
    with LOCK:
        try:
            with open(path, "r", encoding="utf-8") as f:
                script = json.load(f)
        except (OSError, ValueError):
            script = []
        if not script:
            return {"status": 500, "body": '{"error":{"message":"no script entry"}}'}
        entry = script[0]
        if len(script) > 1:
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(script[1:], f)
            os.replace(tmp, path)
        return entry


def synth_anthropic(total, delta):
    out = [
        'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_synth","type":"message",'
        '"role":"assistant","model":"claude-sonnet-4-6","content":[],"stop_reason":null,"usage":'
        '{"input_tokens":10,"output_tokens":1}}}\n\n',
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":'
        '{"type":"text","text":""}}\n\n',
    ]
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    piece = (words * (delta // len(words) + 2))[: delta - 1] + "\\n"
    n = max(1, total // delta)
    ev = ('event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":'
          '{"type":"text_delta","text":"%s"}}\n\n' % piece)
    out.append(ev * n)
    out.append('event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n')
    out.append('event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
               '"usage":{"output_tokens":%d}}\n\n' % n)
    out.append('event: message_stop\ndata: {"type":"message_stop"}\n\n')
    return "".join(out).encode()


def synth_anthropic_tool(total, delta, piece=None):
    def ev(name, obj):
        return "event: %s\ndata: %s\n\n" % (name, json.dumps(obj, separators=(",", ":")))

    head = '{"path": "big.txt", "content": "'
    tail = '"}'
    room = max(0, total - len(head) - len(tail))
    if piece:
        # Whole pieces only (a piece holds JSON escapes that must not be cut).
        body = piece * (room // len(piece))
    else:
        body = ("0123456789abcdef" * (total // 16 + 1))[:room]
    text = head + body + tail
    out = [
        ev("message_start", {"type": "message_start", "message": {"id": "msg_synth_tool", "type": "message",
           "role": "assistant", "model": "claude-sonnet-4-6", "content": [], "stop_reason": None,
           "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block":
           {"type": "tool_use", "id": "toolu_synth", "name": "write", "input": {}}}),
    ]
    for i in range(0, len(text), delta):
        out.append(ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta":
                      {"type": "input_json_delta", "partial_json": text[i:i + delta]}}))
    out.append(ev("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                  "usage": {"output_tokens": len(text) // 4}}))
    out.append(ev("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        record = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        with LOCK:
            with open(os.path.join(DIR, "requests.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        self.answer(next_entry())

    do_GET = do_POST

    def answer(self, e):
        status = e.get("status", 200)
        if "fixture" in e:
            with open(os.path.join(FIXTURES, e["fixture"]), "rb") as f:
                data = f.read()
            ctype = "text/event-stream"
        elif "gen" in e:
            return self.answer_gen(e, status)
        elif "synth" in e:
            s = e["synth"]
            if s.get("kind") == "anthropic_tool":
                data = synth_anthropic_tool(int(s.get("bytes", 1000)), int(s.get("delta", 64)), s.get("piece"))
            else:
                data = synth_anthropic(int(s.get("bytes", 1000)), int(s.get("delta", 64)))
            ctype = "text/event-stream"
        elif "pieces" in e:
            data = "".join(e["pieces"]).encode()
            ctype = "text/event-stream"
        else:
            data = e.get("body", "").encode()
            ctype = "application/json"
        ctype = e.get("content_type", ctype)
        chunked = not e.get("no_chunked")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for k, v in (e.get("headers") or {}).items():
            self.send_header(k, str(v))
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

        limit = e.get("truncate_at")
        if limit is not None:
            data = data[: int(limit)]
        if "pieces" in e and limit is None:
            pieces = [p.encode() for p in e["pieces"]]
        elif "chunk_seed" in e:
            rng = random.Random(e["chunk_seed"])
            biggest = int(e.get("max_chunk", 64))
            pieces, i = [], 0
            while i < len(data):
                n = rng.randint(1, biggest)
                pieces.append(data[i:i + n])
                i += n
        else:
            pieces = [data[i:i + 65536] for i in range(0, len(data), 65536)]
        delay = e.get("delay_ms", 0) / 1000.0
        try:
            for p in pieces:
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
                else:
                    self.wfile.write(p)
                self.wfile.flush()
                if delay:
                    time.sleep(delay)
            if e.get("hang_ms"):
                time.sleep(e["hang_ms"] / 1000.0)
            if limit is not None:
                # A broken stream: drop the connection without the final chunk.
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def answer_gen(self, e, status):
        g = e["gen"]
        head = g.get("head", "").encode()
        piece = g.get("piece", "")
        tail = g.get("tail", "").encode()
        count = g.get("count")
        numbered = "{n}" in piece
        self.send_response(status)
        self.send_header("Content-Type", e.get("content_type", "text/event-stream"))
        for k, v in (e.get("headers") or {}).items():
            self.send_header(k, str(v))
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()

        def chunk(data):
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        try:
            chunk(head)
            # Pieces go out in writes of about 64 KiB.
            fixed = piece.encode()
            per = max(1, 65536 // max(1, len(fixed)))
            n = 0
            while count is None or n < count:
                k = per if count is None else min(per, count - n)
                if numbered:
                    data = "".join(piece.replace("{n}", str(n + i)) for i in range(k)).encode()
                else:
                    data = fixed * k
                chunk(data)
                n += k
            chunk(tail)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main():
    server = ThreadingHTTPServer((os.environ.get("LLM_SERVER_HOST", "127.0.0.1"), 0), Handler)
    server.daemon_threads = True
    print("PORT %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
