// 256 concurrent streaming chat clients against `deepinfer serve` for a bounded time
// (LOAD_SECONDS, default 15): no errors, every stream complete ([DONE], one finish_reason), the
// greedy streamed text and token count equal to the non-streaming answer (nothing lost or
// repeated), and afterwards the engine idle, its cache blocks released and the server's resident
// memory back near its post-warmup level.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { metric, modelName, residentBytes, startServer, waitForMetrics } from './server.mjs';

const clients = 256;
const loadSeconds = Number(process.env.LOAD_SECONDS ?? 15);
const maxTokens = 12;
const prompts = ['Hello there', 'Write a haiku about the sea', '1 2 3 4', 'What is a monad?',
                 'Translate "cat" to French', 'Name three colours', 'Why is the sky blue?', 'Say hi'];
// Resident memory may settle above the post-warm-up level by what heap fragmentation keeps
// (measured: 8-33 MiB after ~1,100 streams, levelling off after a few thousand), never by what a
// leak adds up to: 64 KiB a request over the ~1,000 requests of a run fails.
const rssToleranceBytes = 64 << 20;

let server;
before(async () => {
  // One malloc arena: glibc otherwise gives each busy thread (HTTP workers, compute) its own arena,
  // whose freed pages stay resident, and RSS drifts up by tens of MiB over the first few thousand
  // requests before it levels off; with one arena the drift is a few MiB, so a leak stands out.
  server = await startServer(['--cache-memory', '256M'], { MALLOC_ARENA_MAX: '1' });
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, 'SIGTERM exits 0');
});

const requestFor = (prompt, stream) => ({
  model: modelName, messages: [{ role: 'user', content: prompt }], max_tokens: maxTokens, temperature: 0,
  thinking: { type: 'disabled' },  // the answer comes as content (thinking mode: reasoning_content)
  ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
});

async function post(body) {
  return fetch(`${server.baseUrl}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
}

// One streaming request, read frame by frame; throws on anything a client would call an error.
async function streamOnce(prompt) {
  const response = await post(requestFor(prompt, true));
  if (response.status !== 200) throw new Error(`status ${response.status}: ${await response.text()}`);
  assert.equal(response.headers.get('content-type'), 'text/event-stream');
  const decoder = new TextDecoder();
  let buffer = '';
  const out = { text: '', finishes: [], usage: null, done: false, ids: new Set() };
  const take = (frame) => {
    for (const line of frame.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (out.done) throw new Error(`data after [DONE]: ${data}`);
      if (data === '[DONE]') {
        out.done = true;
        continue;
      }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`error frame: ${data}`);
      out.ids.add(chunk.id);
      if (chunk.usage) out.usage = chunk.usage;
      for (const choice of chunk.choices) {
        out.text += (choice.delta?.reasoning_content ?? '') + (choice.delta?.content ?? '');
        if (choice.finish_reason) out.finishes.push(choice.finish_reason);
      }
    }
  };
  for await (const bytes of response.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      take(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
    }
  }
  take(buffer);
  return out;
}

test(`${clients} concurrent streaming clients for ${loadSeconds} s`, async () => {
  const expected = new Map();
  for (const prompt of prompts) {
    const response = await post(requestFor(prompt, false));
    assert.equal(response.status, 200);
    const body = await response.json();
    const message = body.choices[0].message;
    assert.ok(message.content.length > 0);
    expected.set(prompt, { text: (message.reasoning_content ?? '') + message.content, tokens: body.usage.completion_tokens,
                           finish: body.choices[0].finish_reason });
  }
  const failures = [];
  let completed = 0;
  const check = (prompt, out) => {
    const want = expected.get(prompt);
    if (!out.done) throw new Error('stream ended without [DONE]');
    if (out.finishes.length !== 1) throw new Error(`finish reasons: ${JSON.stringify(out.finishes)}`);
    if (out.ids.size !== 1) throw new Error(`${out.ids.size} ids in one stream`);
    if (out.text !== want.text) throw new Error(`text ${JSON.stringify(out.text)} != ${JSON.stringify(want.text)}`);
    if (out.usage?.completion_tokens !== want.tokens) throw new Error(`completion_tokens ${out.usage?.completion_tokens} != ${want.tokens}`);
    if (out.finishes[0] !== want.finish) throw new Error(`finish ${out.finishes[0]} != ${want.finish}`);
  };
  // Each client streams request after request until the deadline.
  const runClients = async (deadline) => {
    await Promise.all(Array.from({ length: clients }, async (_, client) => {
      for (let round = 0; ; ++round) {
        const prompt = prompts[(client + round) % prompts.length];
        try {
          check(prompt, await streamOnce(prompt));
          completed += 1;
        } catch (error) {
          failures.push(`client ${client} round ${round}: ${error.message}`);
        }
        if (Date.now() >= deadline) return;
      }
    }));
  };
  const idle = { 'deepinfer:num_requests_running': 0, 'deepinfer:num_requests_waiting': 0,
                 'deepinfer:kv_cache_blocks_in_use': 0 };

  // Warm-up: one request per client brings up every HTTP worker, allocator arena and cache block.
  await runClients(0);
  assert.deepEqual(failures, []);
  assert.deepEqual(await waitForMetrics(server.baseUrl, idle), idle);
  const baseline = residentBytes(server.pid);
  const cacheUsage = async () => `cache ${(100 * await metric(server.baseUrl, 'deepinfer:kv_cache_usage_perc')).toFixed(2)}% ` +
    `not free, ${await metric(server.baseUrl, 'deepinfer:kv_cache_snapshot_blocks')} snapshot blocks`;
  console.log(`load: after warm-up ${await cacheUsage()}`);

  completed = 0;
  const started = Date.now();
  await runClients(started + loadSeconds * 1000);
  const seconds = (Date.now() - started) / 1000;
  console.log(`load: ${completed} streams by ${clients} clients in ${seconds.toFixed(1)} s ` +
              `(${(completed * maxTokens / seconds).toFixed(0)} tokens/s at most), ${failures.length} failures`);
  assert.deepEqual(failures.slice(0, 10), [], `${failures.length} failed streams`);
  assert.ok(completed >= clients, `only ${completed} streams completed`);

  assert.deepEqual(await waitForMetrics(server.baseUrl, idle), idle, 'engine idle, cache blocks released');
  let resident = residentBytes(server.pid);
  for (let i = 0; i < 40 && resident > baseline + rssToleranceBytes; ++i) {
    await new Promise((r) => setTimeout(r, 50));
    resident = residentBytes(server.pid);
  }
  console.log(`load: after the load ${await cacheUsage()}`);
  console.log(`load: resident memory ${(baseline / 2 ** 20).toFixed(1)} MiB after warm-up, ` +
              `${(resident / 2 ** 20).toFixed(1)} MiB after the load`);
  assert.ok(resident <= baseline + rssToleranceBytes,
            `resident memory grew from ${baseline} to ${resident} bytes`);
});
