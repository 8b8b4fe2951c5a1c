// Streaming clients against a running `deepinfer serve`: CLIENTS connections, each sending
// streaming chat requests one after another for SECONDS (a fresh connection per request, as
// most SDK clients under load end up doing), measuring per request the time to the first byte
// of the response (the status line) and to the first SSE event, the SSE events received, and
// whether the stream ended with [DONE]. Prints one JSON line:
//   {clients, seconds, requests, failed, events_per_s, requests_per_s,
//    ttfb_ms: {p50, p99}, first_event_ms: {p50, p99}}
// Raw sockets (node:net), so the numbers are the server's, not an HTTP client library's.
//   node bench/http_stream_bench.mjs PORT CLIENTS SECONDS [MAX_TOKENS]
import net from "node:net";

const [port, clients, seconds, maxTokens] = [
  Number(process.argv[2] ?? 8000), Number(process.argv[3] ?? 256), Number(process.argv[4] ?? 20),
  Number(process.argv[5] ?? 16)];

function request(i) {
  const body = JSON.stringify({
    model: "tiny", stream: true, max_tokens: maxTokens, ignore_eos: true,
    messages: [{ role: "user", content: `Count to ten, please (${i % 8}).` }],
  });
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

function once(i) {
  return new Promise((resolve) => {
    const start = process.hrtime.bigint();
    let ttfb = null, firstEvent = null, events = 0, text = "";
    const socket = net.connect({ port, host: "127.0.0.1" }, () => socket.write(request(i)));
    const ms = () => Number(process.hrtime.bigint() - start) / 1e6;
    socket.setTimeout(120_000, () => socket.destroy());
    socket.on("data", (chunk) => {
      if (ttfb === null) ttfb = ms();
      text += chunk.toString("latin1");
      const count = (text.match(/\ndata: /g) || []).length + (text.startsWith("data: ") ? 1 : 0);
      if (count > 0 && firstEvent === null) firstEvent = ms();
      events = count;
    });
    const done = () => resolve({
      ok: text.startsWith("HTTP/1.1 200") && text.includes("data: [DONE]"), ttfb, firstEvent, events,
    });
    socket.on("close", done);
    socket.on("error", () => {});
  });
}

const results = [];
const end = Date.now() + seconds * 1000;
let next = 0;
async function client() {
  while (Date.now() < end) results.push(await once(next++));
}
const began = Date.now();
await Promise.all(Array.from({ length: clients }, client));
const elapsed = (Date.now() - began) / 1000;

const pct = (values, p) => {
  const sorted = values.filter((v) => v !== null).sort((a, b) => a - b);
  return sorted.length ? Math.round(sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] * 10) / 10 : null;
};
const good = results.filter((r) => r.ok);
console.log(JSON.stringify({
  clients, seconds: Math.round(elapsed * 10) / 10, requests: results.length, failed: results.length - good.length,
  requests_per_s: Math.round((good.length / elapsed) * 10) / 10,
  events_per_s: Math.round(good.reduce((n, r) => n + r.events, 0) / elapsed),
  ttfb_ms: { p50: pct(good.map((r) => r.ttfb), 0.5), p99: pct(good.map((r) => r.ttfb), 0.99) },
  first_event_ms: { p50: pct(good.map((r) => r.firstEvent), 0.5), p99: pct(good.map((r) => r.firstEvent), 0.99) },
}));
