#!/usr/bin/env python3
"""A small MCP stdio server whose answers hold long strings (spec/flemma/mcp_blob_spec.lua,
bench/mcp_result_bench.lua): JSON-RPC 2.0, one message a line.

    python3 mcp_blob_server.py DIR

Tools (each writes what it sends to DIR first, for the spec to compare byte for byte):
  text    {bytes}: a text of about `bytes` bytes with what JSON escapes (quotes,
          backslashes, tabs, newlines, a control character) and multi-byte UTF-8;
          written to DIR/text.txt
  image   {bytes}: a PNG of `bytes` bytes (its signature, then noise), as base64;
          the bytes written to DIR/image.png
  nested  {bytes}: long strings deep in structuredContent (arrays in objects in
          arrays, a key with a quote), next to short ones; the whole result as JSON
          in DIR/nested.json
The payloads are also used by mcp_http_server.py (mode `blobs`).
"""
import base64
import json
import os
import sys

PIECE = 'line %07d: "quoted" back\\slash\ttab \x01 \u00e9t\u00e9 \u20ac \U0001F600 {[,:]}\n'


def text(n):
    parts, size, i = [], 0, 0
    while size < n:
        p = PIECE % i
        parts.append(p)
        size += len(p.encode("utf-8"))
        i += 1
    return "".join(parts)


def png(n):
    out = bytearray((i * 7919 + (i >> 8)) & 255 for i in range(n))
    out[0:8] = b"\x89PNG\r\n\x1a\n"
    return bytes(out)


def nested(n):
    a, b, c = text(n), text(n // 2)[::-1], "z" * (n // 3)
    return {
        "content": [{"type": "text", "text": "nested"}],
        "structuredContent": {
            "deep": [{"a": [a, "short", {"b": [[b]], "n": 1, "null": None}]}, "x"],
            'k"ey': c,
            "list": [c, a],
        },
    }


def result(name, args, out_dir):
    n = int(args.get("bytes") or 100000)
    if name == "text":
        t = text(n)
        with open(os.path.join(out_dir, "text.txt"), "wb") as f:
            f.write(t.encode("utf-8"))
        return {"content": [{"type": "text", "text": t}]}
    if name == "image":
        data = png(n)
        with open(os.path.join(out_dir, "image.png"), "wb") as f:
            f.write(data)
        return {"content": [{"type": "image", "mimeType": "image/png", "data": base64.b64encode(data).decode()}]}
    if name == "nested":
        r = nested(n)
        with open(os.path.join(out_dir, "nested.json"), "w", encoding="utf-8") as f:
            json.dump(r, f, ensure_ascii=False)
        return r
    return None


TOOLS = [
    {"name": t, "description": "long strings: " + t, "inputSchema": {"type": "object", "properties": {"bytes": {"type": "number"}}}}
    for t in ("text", "image", "nested")
]


def dumps(msg):
    return json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def main():
    out_dir = sys.argv[1]
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        m, rid = msg.get("method"), msg.get("id")
        if rid is None:
            continue
        if m == "initialize":
            res = {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "blobs", "version": "1"},
            }
        elif m == "tools/list":
            res = {"tools": TOOLS}
        elif m == "tools/call":
            res = result(msg["params"]["name"], msg["params"].get("arguments") or {}, out_dir)
        else:
            res = None
        if res is None:
            reply = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
        else:
            reply = {"jsonrpc": "2.0", "id": rid, "result": res}
        out.write(dumps(reply) + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
