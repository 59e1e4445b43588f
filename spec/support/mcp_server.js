#!/usr/bin/env node
// A small MCP stdio server for the specs, misbehaving on purpose (argv[2]):
//   plain    answers properly: tools `echo`, `slow` (never answers) and `grow` (adds the
//            tool `added` and says so with notifications/tools/list_changed; before
//            answering it pings the client); tools/list in pages of one tool
//   crash    tool `boom` writes to stderr and exits with code 3
//   noisy    as crash, but `boom` first writes 8 MB of lines to stderr
//   chatty   tool `echo`; writes 8 MB of lines to stderr as it starts, then runs on
//   silent   never answers anything (initialize times out)
//   garbage  before answering initialize writes a line of garbage and a 50 MB line
//   big      tool `big` answers with a text of `lines` lines of `width` bytes each;
//            tool `image` with a PNG of `bytes` bytes (a PNG signature, then noise);
//            tool `progress` sends one notifications/progress with `message`, answers 1 s later
// Every line received is appended to $MCP_SPEC_LOG when set.
"use strict";
const fs = require("fs");
const mode = process.argv[2] || "plain";
const logPath = process.env.MCP_SPEC_LOG;
process.stderr.write(`spec server (${mode}) up, pid ${process.pid}\n`);
if (mode === "chatty") {
  const block = "chatter: the spec server talks on stderr as it starts\n".repeat(1024);
  for (let i = 0; i < 160; i++) process.stderr.write(block);
  process.stderr.write("chatter: done\n");
}

function send(msg) {
  process.stdout.write(JSON.stringify(msg) + "\n");
}

const tools = {
  plain: [
    { name: "echo", description: "echoes", inputSchema: { type: "object", properties: { text: { type: "string" } } } },
    { name: "slow", description: "answers only when cancelled", inputSchema: { type: "object" } },
    { name: "grow", description: "adds a tool", inputSchema: { type: "object" } },
  ],
  crash: [{ name: "boom", description: "crashes the server", inputSchema: { type: "object" } }],
  noisy: [{ name: "boom", description: "crashes the server", inputSchema: { type: "object" } }],
  chatty: [{ name: "echo", description: "echoes", inputSchema: { type: "object", properties: { text: { type: "string" } } } }],
  big: [
    { name: "big", description: "a large text", inputSchema: { type: "object", properties: { lines: { type: "number" }, width: { type: "number" } } } },
    { name: "image", description: "a large image", inputSchema: { type: "object", properties: { bytes: { type: "number" } } } },
    { name: "progress", description: "says how far it is", inputSchema: { type: "object", properties: { message: { type: "string" } } } },
  ],
  garbage: [{ name: "echo", description: "echoes", inputSchema: { type: "object", properties: { text: { type: "string" } } } }],
};

function handle(msg) {
  if (mode === "silent") return;
  if (msg.method === "initialize") {
    if (mode === "garbage") {
      process.stdout.write("this is not JSON at all\n");
      const chunk = "x".repeat(1 << 20);
      for (let i = 0; i < 50; i++) process.stdout.write(chunk);
      process.stdout.write("\n");
    }
    send({ jsonrpc: "2.0", id: msg.id, result: { protocolVersion: msg.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: "spec", version: "1" } } });
  } else if (msg.method === "tools/list") {
    if (mode === "plain") {
      const at = Number((msg.params && msg.params.cursor) || 0);
      const result = { tools: tools.plain.slice(at, at + 1) };
      if (at + 1 < tools.plain.length) result.nextCursor = String(at + 1);
      send({ jsonrpc: "2.0", id: msg.id, result });
    } else {
      send({ jsonrpc: "2.0", id: msg.id, result: { tools: tools[mode] } });
    }
  } else if (msg.method === "tools/call") {
    const name = msg.params.name;
    if (name === "boom") {
      if (mode === "noisy") {
        // A full pipe queues the writes: exit once the last one is out.
        const block = "noise: the spec server is chatty on stderr today\n".repeat(1024);
        for (let i = 0; i < 160; i++) process.stderr.write(block);
        process.stderr.write("boom: the spec server crashes now\n", () => process.exit(3));
        return;
      }
      process.stderr.write("boom: the spec server crashes now\n");
      process.exit(3);
    } else if (name === "grow") {
      send({ jsonrpc: "2.0", id: "ping-1", method: "ping" });
      tools.plain.push({ name: "added", description: "added later", inputSchema: { type: "object" } });
      send({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "grown" }] } });
    } else if (name === "progress") {
      const token = msg.params._meta && msg.params._meta.progressToken;
      send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, total: 2, message: (msg.params.arguments || {}).message || "" } });
      setTimeout(() => send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "done" }] } }), 1000);
    } else if (name === "image") {
      const n = (msg.params.arguments || {}).bytes || 1024;
      const buf = Buffer.alloc(n);
      for (let i = 0; i < n; i++) buf[i] = (i * 7919 + (i >> 8)) & 255;
      Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(buf, 0);
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "image", mimeType: "image/png", data: buf.toString("base64") }] } });
    } else if (name === "big") {
      const a = msg.params.arguments || {};
      const line = "b".repeat(Math.max(0, (a.width || 100) - 1)) + "\n";
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "big: start\n" + line.repeat(a.lines || 1) + "big: end" }] } });
    } else if (name === "echo") {
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "echo: " + (msg.params.arguments.text || "") }] } });
    }
    // slow: no answer
  } else if (msg.id !== undefined && msg.method) {
    send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "unknown method" } });
  }
}

let buf = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (logPath) fs.appendFileSync(logPath, line + "\n");
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (e) {
      continue;
    }
    handle(msg);
  }
});
process.stdin.on("end", () => process.exit(0));
