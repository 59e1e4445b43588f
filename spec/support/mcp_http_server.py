#!/usr/bin/env python3
"""Loopback helpers of the MCP Streamable HTTP specs (spec/flemma/mcp_http_spec.lua).

    python3 mcp_http_server.py DIR proxy UPSTREAM_PORT
    python3 mcp_http_server.py DIR MODE

Listens on 127.0.0.1 (a free port) and prints "PORT <n>" on stdout. Each request's
method, path and headers (names lower-cased) are appended as one JSON line to
DIR/requests.jsonl before anything else happens.

proxy: passes every connection on to 127.0.0.1:UPSTREAM_PORT byte for byte (the real
server's answers, SSE streams included, reach the client as they come); it only
records the requests. The other modes are a small MCP server for what the real
server cannot show:
  garbage  initialize is answered with a body that is no JSON
  huge     tools/call `big` is answered with a JSON body of 50 MB
  silent   initialize is never answered (the connection stays open)
  resume   tools/call `slow` answers with an SSE stream that sends one event with an
           id and no data, then breaks; a GET with Last-Event-ID of that id answers
           with the result
  listen   the standing GET stream (no Last-Event-ID) sends notifications/tools/
           list_changed as event g-1 (tools/list then also has `fresh`), then breaks;
           a GET with Last-Event-ID g-1 is held open without events
  refuse   every GET is answered with HTTP 500
  blobs    the tools of mcp_blob_server.py (long strings; what they send is written to
           DIR): `text` answers with a JSON body, `nested` with an SSE stream
"""
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_blob_server  # noqa: E402

DIR = sys.argv[1]
MODE = sys.argv[2]
LOCK = threading.Lock()


def record(method, path, headers):
    with LOCK:
        with open(os.path.join(DIR, "requests.jsonl"), "a") as f:
            f.write(json.dumps({"method": method, "path": path, "headers": headers}) + "\n")


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def parse_head(head):
    lines = head.split("\r\n")
    method, path = lines[0].split(" ")[:2]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return method, path, headers


def read_body(conn, rest, headers):
    n = int(headers.get("content-length", "0") or "0")
    while len(rest) < n:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return rest[:n]


def pipe(src, dst):
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def proxy(conn, upstream_port):
    head, rest = read_head(conn)
    if head is None:
        conn.close()
        return
    method, path, headers = parse_head(head)
    record(method, path, headers)
    up = socket.create_connection(("127.0.0.1", upstream_port))
    up.sendall(head.encode("latin-1") + b"\r\n\r\n" + rest)
    t = threading.Thread(target=pipe, args=(up, conn), daemon=True)
    t.start()
    pipe(conn, up)
    t.join(60)
    conn.close()
    up.close()


def send(conn, status, body, content_type="application/json", extra=""):
    conn.sendall(
        (
            "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n"
            % (status, content_type, len(body), extra)
        ).encode()
        + body
    )


def answer(rid, result):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()


TOOLS = [
    {"name": "big", "description": "a huge answer", "inputSchema": {"type": "object"}},
    {"name": "slow", "description": "a broken stream", "inputSchema": {"type": "object"}},
]


def stub(conn):
    global SLOW_ID, CHANGED
    head, rest = read_head(conn)
    if head is None:
        conn.close()
        return
    method, path, headers = parse_head(head)
    record(method, path, headers)
    body = read_body(conn, rest, headers)
    sid = "stub-session-1"
    if method == "DELETE":
        send(conn, 200, b"")
        conn.close()
        return
    if method == "GET":
        if MODE == "refuse":
            send(conn, 500, b"")
            conn.close()
            return
        if MODE == "listen":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            if headers.get("last-event-id") is None:
                CHANGED = True
                note = json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode()
                ev = b"id: g-1\ndata: " + note + b"\n\n"
                conn.sendall(head + b"%x\r\n" % len(ev) + ev + b"\r\n")
                time.sleep(0.5)
                # Broken: the connection closes without the last chunk.
            else:
                conn.sendall(head)
                time.sleep(600)
            conn.close()
            return
        if MODE == "resume" and headers.get("last-event-id") == "ev-1":
            msg = answer(SLOW_ID, {"content": [{"type": "text", "text": "resumed after ev-1"}]})
            out = b"id: ev-2\ndata: " + msg + b"\n\n"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + out)
        else:
            send(conn, 405, b"")
        conn.close()
        return
    msg = json.loads(body or b"{}")
    m = msg.get("method")
    rid = msg.get("id")
    if m == "initialize":
        if MODE == "silent":
            time.sleep(600)
            conn.close()
            return
        if MODE == "garbage":
            send(conn, 200, b"<html>this is { not json", extra="Mcp-Session-Id: %s\r\n" % sid)
            conn.close()
            return
        res = {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stub", "version": "1"},
        }
        send(conn, 200, answer(rid, res), extra="Mcp-Session-Id: %s\r\n" % sid)
    elif rid is None:
        send(conn, 202, b"")
    elif m == "tools/list":
        fresh = [{"name": "fresh", "description": "after list_changed", "inputSchema": {"type": "object"}}]
        if MODE == "blobs":
            send(conn, 200, answer(rid, {"tools": mcp_blob_server.TOOLS}))
        else:
            send(conn, 200, answer(rid, {"tools": TOOLS + (fresh if CHANGED else [])}))
    elif m == "tools/call" and MODE == "blobs":
        p = msg["params"]
        res = mcp_blob_server.result(p["name"], p.get("arguments") or {}, DIR)
        body = mcp_blob_server.dumps({"jsonrpc": "2.0", "id": rid, "result": res})
        if p["name"] == "nested":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                + b"id: n-1\ndata: " + body + b"\n\n"
            )
        else:
            send(conn, 200, body)
    elif m == "tools/call" and msg["params"]["name"] == "big":
        text = "x" * (50 * 1024 * 1024)
        send(conn, 200, answer(rid, {"content": [{"type": "text", "text": text}]}))
    elif m == "tools/call" and msg["params"]["name"] == "slow":
        # Its id is answered by the GET that resumes the stream.
        SLOW_ID = rid
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(b"id: ev-1\ndata:\n\n")
            + b"id: ev-1\ndata:\n\n\r\n"
        )
        time.sleep(0.2)
        # Broken: the connection closes without the last chunk.
    else:
        send(conn, 200, json.dumps({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}).encode())
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


SLOW_ID = None
CHANGED = False


def main():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    print("PORT %d" % srv.getsockname()[1], flush=True)
    upstream = int(sys.argv[3]) if MODE == "proxy" else None
    while True:
        conn, _ = srv.accept()
        if MODE == "proxy":
            threading.Thread(target=proxy, args=(conn, upstream), daemon=True).start()
        else:
            threading.Thread(target=stub, args=(conn,), daemon=True).start()


main()
