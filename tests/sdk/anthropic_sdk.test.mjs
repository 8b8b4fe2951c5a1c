// The official `@anthropic-ai/sdk` npm package against `deepinfer serve` (/v1/messages):
// messages, streaming (raw events and the SDK's MessageStream), tools, typed errors.
// Random weights: the checks are protocol and invariants, not content.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { modelName, requirePackages, startServer } from './server.mjs';

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
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  if (whole.content.some((b) => b.type === 'tool_use')) assert.ok(['tool_use', 'max_tokens'].includes(whole.stop_reason));
});

test('errors arrive as the SDK\'s typed errors', async () => {
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', max_tokens: 1, messages: user('hi') }),
    (error) => error instanceof Anthropic.NotFoundError && error.status === 404);
  await assert.rejects(
    client.messages.create({ model: modelName, max_tokens: 100000000, messages: user('hi') }),
    (error) => error instanceof Anthropic.BadRequestError && error.status === 400);
  await assert.rejects(  // as DeepSeek: a forced tool call needs thinking off
    client.messages.create({ model: modelName, max_tokens: 1, messages: user('hi'), tools: [weatherTool],
                             tool_choice: { type: 'tool', name: 'get_weather' } }),
    (error) => error instanceof Anthropic.BadRequestError && /[Tt]hinking mode/.test(error.message));
});

test('messages.countTokens counts the prompt messages.create runs', async () => {
  const request = { model: modelName, system: 'Be brief.', messages: user('Weather in Paris?'), tools: [weatherTool] };
  const counted = await client.messages.countTokens(request);
  const message = await client.messages.create({ ...request, max_tokens: 1 });
  assert.equal(counted.input_tokens, message.usage.input_tokens + message.usage.cache_read_input_tokens);
  await assert.rejects(client.messages.countTokens({ ...request, model: 'other' }),
                       (error) => error instanceof Anthropic.NotFoundError);
});
