// The official `@anthropic-ai/sdk` npm package against `deepinfer serve` (/v1/messages):
// messages, streaming (raw events and the SDK's MessageStream), tools, tool_choice, typed errors
// (Anthropic's error object for every status the server answers).
// Random weights: the checks are protocol and invariants, not content.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { modelName, requirePackages, startServer, waitForMetrics } from './server.mjs';

await requirePackages('@anthropic-ai/sdk');
const { default: Anthropic } = await import('@anthropic-ai/sdk');

let server;
let client;
before(async () => {
  server = await startServer();
  client = new Anthropic({ baseURL: server.baseUrl, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, 'SIGTERM exits 0');
});

const user = (content) => [{ role: 'user', content }];
const weatherTool = {
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};
const textOf = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const thinkingOf = (message) => message.content.filter((b) => b.type === 'thinking').map((b) => b.thinking).join('');
// DeepSeek's Messages API thinks unless told not to (recipe: thinking on by default).
const noThinking = { thinking: { type: 'disabled' } };

function checkMessage(message, maxTokens) {
  assert.equal(message.type, 'message');
  assert.equal(message.role, 'assistant');
  assert.equal(message.model, modelName);
  assert.match(message.id, /^msg_/);
  assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(message.stop_reason), message.stop_reason);
  assert.ok(message.usage.input_tokens > 0);
  assert.ok(message.usage.output_tokens >= 1 && message.usage.output_tokens <= maxTokens);
  for (const block of message.content) assert.ok(['text', 'thinking', 'tool_use'].includes(block.type), block.type);
}

test('messages without streaming', async () => {
  const message = await client.messages.create({
    model: modelName, max_tokens: 8, messages: user('Hello there'), temperature: 0 });
  checkMessage(message, 8);
  // Ids held for an incomplete UTF-8 character at the end count for nothing (the recipe), so a
  // max_tokens stop may report up to three fewer; a full count is always a max_tokens stop.
  if (message.usage.output_tokens === 8) assert.equal(message.stop_reason, 'max_tokens');
  if (message.stop_reason === 'max_tokens') assert.ok(message.usage.output_tokens >= 5);
});

test('system prompt and multi-turn history are accepted', async () => {
  const message = await client.messages.create({
    model: modelName, max_tokens: 4, system: 'You are terse.', temperature: 0,
    messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello.' },
               { role: 'user', content: [{ type: 'text', text: 'Again?' }] }] });
  checkMessage(message, 4);
});

test('streaming: raw events in order, and the same greedy answer', async () => {
  for (const [prompt, options] of [['Hello there', {}], ['Count to five', noThinking]]) {
    const request = { model: modelName, max_tokens: 12, messages: user(prompt), temperature: 0, ...options };
    const whole = await client.messages.create(request);
    assert.ok((options.thinking ? textOf(whole) : thinkingOf(whole)).length > 0);
    const events = [];
    let text = '';
    let thinking = '';
    let outputTokens = null;
    for await (const event of await client.messages.create({ ...request, stream: true })) {
      events.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'content_block_delta' && event.delta.type === 'thinking_delta') thinking += event.delta.thinking;
      if (event.type === 'message_delta') {
        assert.equal(event.delta.stop_reason, whole.stop_reason);
        outputTokens = event.usage.output_tokens;
      }
    }
    assert.equal(events[0], 'message_start');
    assert.deepEqual(events.slice(-2), ['message_delta', 'message_stop']);
    const starts = events.filter((e) => e === 'content_block_start').length;
    assert.equal(events.filter((e) => e === 'content_block_stop').length, starts);
    assert.equal(text, textOf(whole), `same text for "${prompt}"`);
    assert.equal(thinking, thinkingOf(whole));
    assert.equal(outputTokens, whole.usage.output_tokens);
  }
});

test('MessageStream helper assembles the final message', async () => {
  const request = { model: modelName, max_tokens: 10, messages: user('Tell me a story'), temperature: 0,
                    ...noThinking };
  const whole = await client.messages.create(request);
  assert.ok(textOf(whole).length > 0);
  let streamedText = '';
  const stream = client.messages.stream(request).on('text', (delta) => { streamedText += delta; });
  const final = await stream.finalMessage();
  checkMessage(final, 10);
  assert.equal(streamedText, textOf(whole));
  assert.equal(textOf(final), textOf(whole));
  assert.equal(final.stop_reason, whole.stop_reason);
});

test('tools round trip: tool_use and tool_result in the history', async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: [
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"temperature_c": 21, "sky": "clear"}' }] },
  ];
  const message = await client.messages.create({
    model: modelName, max_tokens: 10, tools: [weatherTool], messages, temperature: 0 });
  checkMessage(message, 10);
  for (const block of message.content.filter((b) => b.type === 'tool_use')) {
    assert.match(block.id, /^toolu_/);
    assert.equal(typeof block.name, 'string');
    assert.equal(typeof block.input, 'object');
  }
  const bare = await client.messages.create({
    model: modelName, max_tokens: 1, tools: [weatherTool], messages: messages.slice(0, 1) });
  assert.ok(message.usage.input_tokens > bare.usage.input_tokens + 10, 'the call and its result are in the prompt');
});

test('a forced tool_choice streams the same blocks as the whole message', async () => {
  const request = { model: modelName, max_tokens: 16, tools: [weatherTool], temperature: 0, ...noThinking,
                    tool_choice: { type: 'tool', name: 'get_weather' }, messages: user('Weather in Oslo?') };
  const whole = await client.messages.create(request);
  checkMessage(whole, 16);
  const final = await client.messages.stream(request).finalMessage();
  // Each message names its tool_use blocks with its own id; the blocks are otherwise the same.
  const withoutIds = (blocks) => blocks.map(({ id, ...rest }) => (id === undefined ? rest : { ...rest, id: /^toolu_/.test(id) }));
  assert.deepEqual(withoutIds(final.content), withoutIds(whole.content));
  assert.equal(final.stop_reason, whole.stop_reason);
  if (whole.content.some((b) => b.type === 'tool_use')) assert.ok(['tool_use', 'max_tokens'].includes(whole.stop_reason));
});

// Every refusal is Anthropic's error object, so the SDK's typed error carries Anthropic's type
// (error.type), the server's message (error.apiMessage, and inside error.message) and the body.
function anthropicError(ErrorClass, status, type, messagePart) {
  return (error) => {
    assert.ok(error instanceof ErrorClass, `${error?.constructor?.name}: ${error?.message}`);
    assert.equal(error.status, status);
    assert.equal(error.type, type, error.message);
    assert.equal(error.error?.type, 'error', error.message);
    assert.equal(typeof error.apiMessage, 'string', error.message);
    if (messagePart instanceof RegExp) assert.match(error.apiMessage, messagePart);
    else assert.ok(error.apiMessage.includes(messagePart), error.apiMessage);
    assert.ok(error.message.includes(error.apiMessage), error.message);
    return true;
  };
}

test('errors arrive as the SDK\'s typed errors, with Anthropic\'s type and the server\'s message', async () => {
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', max_tokens: 1, messages: user('hi') }),
    anthropicError(Anthropic.NotFoundError, 404, 'not_found_error', 'The model `no-such-model` does not exist.'));
  await assert.rejects(  // refused before the stream starts: a status, not an error event
    client.messages.create({ model: 'no-such-model', max_tokens: 1, messages: user('hi'), stream: true }),
    anthropicError(Anthropic.NotFoundError, 404, 'not_found_error', 'The model `no-such-model` does not exist.'));
  await assert.rejects(
    client.messages.create({ model: modelName, max_tokens: 100000000, messages: user('hi') }),
    anthropicError(Anthropic.BadRequestError, 400, 'invalid_request_error', "This model's maximum context length"));
  await assert.rejects(
    client.messages.create({ model: modelName, max_tokens: 1, messages: [{ role: 'system', content: 'hi' }] }),
    anthropicError(Anthropic.BadRequestError, 400, 'invalid_request_error', "expected 'user' or 'assistant'"));
  // As DeepSeek (and Chat Completions' `required`): a forced tool call needs thinking off.
  for (const tool_choice of [{ type: 'tool', name: 'get_weather' }, { type: 'any' }]) {
    await assert.rejects(
      client.messages.create({ model: modelName, max_tokens: 1, messages: user('hi'), tools: [weatherTool],
                               tool_choice }),
      anthropicError(Anthropic.BadRequestError, 400, 'invalid_request_error',
                     'Thinking mode does not support this tool_choice'));
  }
  await assert.rejects(
    client.messages.create({ model: modelName, max_tokens: 1, messages: user('hi'), tools: [weatherTool],
                             tool_choice: { type: 'tool', name: 'get_time' }, ...noThinking }),
    anthropicError(Anthropic.BadRequestError, 400, 'invalid_request_error', "no tool named 'get_time'"));
  await assert.rejects(
    client.messages.countTokens({ model: 'other', messages: user('hi') }),
    anthropicError(Anthropic.NotFoundError, 404, 'not_found_error', 'The model `other` does not exist.'));
  await assert.rejects(  // an unknown path under /v1/messages
    client.post('/v1/messages/batches', { body: {} }),
    anthropicError(Anthropic.NotFoundError, 404, 'not_found_error', 'Not found: POST /v1/messages/batches'));
});

test('tool_choice any forces a tool call as a named tool does', async () => {
  const request = { model: modelName, max_tokens: 16, tools: [weatherTool], temperature: 0, ...noThinking,
                    messages: user('Weather in Oslo?') };
  const any = await client.messages.create({ ...request, tool_choice: { type: 'any' } });
  const named = await client.messages.create({ ...request, tool_choice: { type: 'tool', name: 'get_weather' } });
  const auto = await client.messages.create({ ...request, tool_choice: { type: 'auto' } });
  const none = await client.messages.create({ ...request, tool_choice: { type: 'none' } });
  checkMessage(any, 16);
  // One tool: "any" is the named choice, answer and all (tool_use ids name the message); both
  // prefill the tool-call block.
  const blocks = (m) => m.content.map(({ id, ...block }) => block);
  assert.deepEqual(blocks(any), blocks(named));
  assert.equal(any.stop_reason, named.stop_reason);
  assert.equal(any.usage.input_tokens + any.usage.cache_read_input_tokens,
               named.usage.input_tokens + named.usage.cache_read_input_tokens);
  const prompt = (m) => m.usage.input_tokens + m.usage.cache_read_input_tokens;
  assert.ok(prompt(any) > prompt(auto), 'the forced call is prefilled');
  assert.ok(prompt(none) < prompt(auto), '"none" leaves the tools out of the prompt');
  if (any.content.some((b) => b.type === 'tool_use')) assert.ok(['tool_use', 'max_tokens'].includes(any.stop_reason));
});

// A second server with an API key, a small body limit and a queue of one: 401, 413, 429, then
// 503 while it shuts down with requests still running.
test('API key, body limit, full queue and shutdown errors are the SDK\'s typed errors', async () => {
  const limited = await startServer(['--api-key', 'secret', '--max-body-bytes', '4096', '--max-running', '1',
                                     '--max-waiting', '1']);
  const keyed = new Anthropic({ baseURL: limited.baseUrl, apiKey: 'secret', maxRetries: 0, timeout: 60000 });
  const request = { model: modelName, max_tokens: 2, messages: user('hi'), ...noThinking };
  const holds = [];
  let stopped = null;
  try {
    const wrongKey = new Anthropic({ baseURL: limited.baseUrl, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrongKey.messages.create(request),
                         anthropicError(Anthropic.AuthenticationError, 401, 'authentication_error',
                                        'Incorrect API key provided.'));
    await assert.rejects(wrongKey.messages.countTokens({ model: modelName, messages: user('hi') }),
                         anthropicError(Anthropic.AuthenticationError, 401, 'authentication_error',
                                        'Incorrect API key provided.'));
    await assert.rejects(keyed.messages.create({ ...request, messages: user('a'.repeat(8192)) }),
                         anthropicError(Anthropic.ContentTooLargeError, 413, 'request_too_large',
                                        "larger than the server's limit"));

    // One request runs and one waits, both streaming until aborted: the queue is full.
    const models = await (await fetch(`${limited.baseUrl}/v1/models`, { headers: { 'x-api-key': 'secret' } })).json();
    const long = { ...request, max_tokens: models.data[0].max_model_len - 64, ignore_eos: true, stream: true };
    const hold = () => {
      const controller = new AbortController();
      const done = (async () => {
        try {
          for await (const event of await keyed.messages.create(long, { signal: controller.signal })) void event;
        } catch { /* aborted */ }
      })();
      holds.push({ controller, done });
    };
    hold();
    assert.equal((await waitForMetrics(limited.baseUrl, { 'deepinfer:num_requests_running': 1 }))
      ['deepinfer:num_requests_running'], 1);
    hold();
    const seen = await waitForMetrics(limited.baseUrl,
                                      { 'deepinfer:num_requests_running': 1, 'deepinfer:num_requests_waiting': 1 });
    assert.deepEqual(seen, { 'deepinfer:num_requests_running': 1, 'deepinfer:num_requests_waiting': 1 });
    await assert.rejects(keyed.messages.create(request),
                         anthropicError(Anthropic.RateLimitError, 429, 'rate_limit_error',
                                        'The server is overloaded: the queue is full'));

    stopped = limited.stop();  // SIGTERM: it drains the two running requests, refusing new ones
    for (let i = 0; (await fetch(`${limited.baseUrl}/health`)).status !== 503; ++i) {
      assert.ok(i < 400, 'the server never started draining');
      await new Promise((r) => setTimeout(r, 25));
    }
    await assert.rejects(keyed.messages.create(request),
                         anthropicError(Anthropic.ServiceUnavailableError, 503, 'overloaded_error',
                                        'The server is shutting down'));
  } finally {
    for (const { controller } of holds) controller.abort();
    await Promise.all(holds.map(({ done }) => done));
    assert.equal(await (stopped ?? limited.stop()), 0, 'SIGTERM exits 0');
  }
});

test('messages.countTokens counts the prompt messages.create runs', async () => {
  const request = { model: modelName, system: 'Be brief.', messages: user('Weather in Paris?'), tools: [weatherTool] };
  const counted = await client.messages.countTokens(request);
  const message = await client.messages.create({ ...request, max_tokens: 1 });
  assert.equal(counted.input_tokens, message.usage.input_tokens + message.usage.cache_read_input_tokens);
  await assert.rejects(client.messages.countTokens({ ...request, model: 'other' }),
                       (error) => error instanceof Anthropic.NotFoundError);
});
