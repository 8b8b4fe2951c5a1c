// The official `openai` npm SDK against `deepinfer serve`: chat (with and without streaming),
// a tools round trip, a forced tool call, JSON mode, chat logprobs, completions from token ids (and
// echo with prompt logprobs), the SDK's typed errors, and the Responses API (create with and
// without streaming, the SDK's responses.stream accumulator, a function_call history, errors).
// Random weights: the checks are protocol and invariants, not content.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { modelName, requirePackages, startServer } from './server.mjs';

await requirePackages('openai');
const { default: OpenAI } = await import('openai');

let server;
let client;
before(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, 'SIGTERM exits 0');
});

const user = (content) => [{ role: 'user', content }];
const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

function checkUsage(usage) {
  assert.ok(usage.prompt_tokens > 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(usage.prompt_tokens_details.cached_tokens + usage.prompt_cache_miss_tokens, usage.prompt_tokens);
}

// Streams a chat request and assembles what the SDK hands out.
async function streamChat(request) {
  const stream = await client.chat.completions.create({ ...request, stream: true,
                                                        stream_options: { include_usage: true } });
  const out = { text: '', reasoning: '', pieces: 0, finish: null, usage: null, ids: new Set(), roles: [], toolCalls: [] };
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta.role) out.roles.push(choice.delta.role);
      if (choice.delta.content) {
        out.text += choice.delta.content;
        out.pieces += 1;
      }
      if (choice.delta.reasoning_content) {  // DeepSeek's field: thinking is on by default
        out.reasoning += choice.delta.reasoning_content;
        out.pieces += 1;
      }
      for (const call of choice.delta.tool_calls ?? []) {
        const slot = (out.toolCalls[call.index] ??= { id: '', name: '', arguments: '' });
        slot.id += call.id ?? '';
        slot.name += call.function?.name ?? '';
        slot.arguments += call.function?.arguments ?? '';
      }
      if (choice.finish_reason) {
        assert.equal(out.finish, null, 'one finish_reason per stream');
        out.finish = choice.finish_reason;
      }
    }
  }
  return out;
}

test('models.list names the served model', async () => {
  const models = [];
  for await (const model of client.models.list()) models.push(model);
  assert.deepEqual(models.map((m) => m.id), [modelName]);
  assert.ok(models[0].max_model_len > 0);
});

test('chat without streaming', async () => {
  const completion = await client.chat.completions.create({
    model: modelName, messages: user('Hello there'), max_tokens: 8, temperature: 0 });
  assert.equal(completion.object, 'chat.completion');
  assert.equal(completion.model, modelName);
  assert.match(completion.id, /^chatcmpl-/);
  const [choice] = completion.choices;
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  assert.ok(completion.usage.completion_tokens <= 8);
  checkUsage(completion.usage);
});

test('greedy chat streams exactly the non-streaming answer', async () => {
  for (const [prompt, thinking] of [['Hello there', 'enabled'], ['Write a haiku about the sea', 'disabled'],
                                    ['1 2 3 4', 'disabled']]) {
    const request = { model: modelName, messages: user(prompt), max_tokens: 12, temperature: 0,
                      thinking: { type: thinking } };
    const whole = await client.chat.completions.create(request);
    const streamed = await streamChat(request);
    assert.equal(streamed.ids.size, 1, 'one id across the chunks');
    assert.deepEqual(streamed.roles, ['assistant']);
    assert.equal(streamed.text, whole.choices[0].message.content ?? '', `same text for "${prompt}"`);
    assert.equal(streamed.reasoning, whole.choices[0].message.reasoning_content ?? '');
    // Thinking mode answers in reasoning_content first; without it the text is the content.
    assert.ok((thinking === 'enabled' ? streamed.reasoning : streamed.text).length > 0);
    assert.equal(streamed.finish, whole.choices[0].finish_reason);
    assert.equal(streamed.usage.completion_tokens, whole.usage.completion_tokens);
    assert.equal(streamed.usage.prompt_tokens, whole.usage.prompt_tokens);
    // Each token becomes at most one piece (a piece can hold several tokens of one character).
    assert.ok(streamed.pieces <= streamed.usage.completion_tokens);
    checkUsage(streamed.usage);
  }
});

test('tools round trip: a tool call and its result in the history', async () => {
  const messages = [
    { role: 'user', content: 'What is the weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [
      { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c": 21, "sky": "clear"}' },
  ];
  const completion = await client.chat.completions.create({
    model: modelName, messages, tools: [weatherTool], max_tokens: 10, temperature: 0 });
  const [choice] = completion.choices;
  assert.equal(choice.message.role, 'assistant');
  assert.ok(['stop', 'length', 'tool_calls'].includes(choice.finish_reason), choice.finish_reason);
  for (const call of choice.message.tool_calls ?? []) {
    assert.equal(call.type, 'function');
    assert.equal(typeof call.function.name, 'string');
    assert.equal(typeof call.function.arguments, 'string');
  }
  checkUsage(completion.usage);
  // The history (call + result) is in the prompt: longer than the question alone.
  const bare = await client.chat.completions.create({
    model: modelName, messages: messages.slice(0, 1), tools: [weatherTool], max_tokens: 1 });
  assert.ok(completion.usage.prompt_tokens > bare.usage.prompt_tokens + 10);
});

test('a forced tool_choice', async () => {
  const request = { model: modelName, messages: user('Weather in Oslo?'), tools: [weatherTool],
                    tool_choice: { type: 'function', function: { name: 'get_weather' } },
                    thinking: { type: 'disabled' },  // DeepSeek refuses a forced call in thinking mode
                    max_tokens: 16, temperature: 0 };
  const completion = await client.chat.completions.create(request);
  const [choice] = completion.choices;
  const calls = choice.message.tool_calls ?? [];
  // Random weights rarely complete a DSML invoke: then no call is reported and the markup
  // never leaks into the content (docs/API.md, parser behaviour).
  assert.ok(!(choice.message.content ?? '').includes('DSML'));
  for (const call of calls) {
    assert.match(call.id, /^call_/);
    assert.equal(call.type, 'function');
    assert.equal(typeof call.function.arguments, 'string');
  }
  // The prompt prefilled the calls block, so the answer is parsed as calls: the finish reason
  // says tool_calls once one started, else the model ran out (length) or ended (stop).
  if (calls.length > 0) assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
  else assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  // Each response names its calls with its own id; the calls themselves are the same. (With
  // jump-forward the forced invoke tags come at once, so a call starts within max_tokens.)
  const streamed = await streamChat(request);
  assert.equal(streamed.finish, choice.finish_reason);
  for (const call of streamed.toolCalls) assert.match(call.id, /^call_/);
  assert.deepEqual(streamed.toolCalls.map((c) => [c.name, c.arguments]),
                   calls.map((c) => [c.function.name, c.function.arguments]));
});

test('JSON mode', async () => {
  const completion = await client.chat.completions.create({
    model: modelName, messages: user('Reply with a JSON object'), response_format: { type: 'json_object' },
    thinking: { type: 'disabled' },
    max_tokens: 8, temperature: 0 });
  const [choice] = completion.choices;
  assert.ok(['stop', 'length'].includes(choice.finish_reason), choice.finish_reason);
  assert.equal(typeof (choice.message.content ?? ''), 'string');
  checkUsage(completion.usage);
});

test('chat logprobs: one entry per answer token, best alternatives first, streamed the same', async () => {
  const request = { model: modelName, messages: user('Hi'), logprobs: true, top_logprobs: 2, max_tokens: 5,
                    temperature: 0, thinking: { type: 'disabled' } };
  const completion = await client.chat.completions.create(request);
  assert.equal(completion.object, 'chat.completion');
  const [choice] = completion.choices;
  assert.equal(choice.logprobs.refusal, null);
  const content = choice.logprobs.content;
  assert.equal(content.length, completion.usage.completion_tokens);
  for (const entry of content) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes) && entry.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    assert.equal(entry.top_logprobs.length, 2);
    assert.ok(entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob, 'best first');
    assert.ok(entry.top_logprobs[0].logprob >= entry.logprob - 1e-6, 'greedy picks the best token');
  }

  const stream = await client.chat.completions.create({ ...request, stream: true });
  const streamed = [];
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);

  await assert.rejects(client.chat.completions.create({ ...request, logprobs: false }),
                       (error) => error instanceof OpenAI.BadRequestError && error.param === 'top_logprobs');
});

test('completions from token ids, with logprobs, streamed and not', async () => {
  const request = { model: modelName, prompt: [0, 300, 4000, 17], max_tokens: 6, temperature: 0, logprobs: 2 };
  const whole = await client.completions.create(request);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.usage.prompt_tokens, 4);
  const [choice] = whole.choices;
  const generated = whole.usage.completion_tokens;
  assert.ok(generated >= 1 && generated <= 6);
  assert.ok(['stop', 'length'].includes(choice.finish_reason));
  assert.equal(choice.logprobs.tokens.length, generated);
  assert.equal(choice.logprobs.tokens.join(''), choice.text);
  for (const [i, logprob] of choice.logprobs.token_logprobs.entries()) {
    assert.ok(logprob <= 0);
    const top = Object.values(choice.logprobs.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 2);
    assert.ok(Math.max(...top) >= logprob - 1e-6, 'greedy picks a top token');
  }

  const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let tokens = 0;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      tokens += c.logprobs?.tokens?.length ?? 0;
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(text, choice.text);
  assert.equal(tokens, generated, 'one logprobs entry per streamed token: none lost, none repeated');
  assert.equal(usage.completion_tokens, generated);
  assert.equal(finish, choice.finish_reason);
});

test('completions echo with logprobs and max_tokens 0 score the prompt (lm-eval loglikelihood)', async () => {
  const prompt = [0, 300, 4000, 17];
  const scored = await client.completions.create({ model: modelName, prompt, echo: true, logprobs: 1, max_tokens: 0 });
  const [choice] = scored.choices;
  assert.equal(scored.usage.completion_tokens, 0);
  assert.equal(choice.finish_reason, 'length');
  const { tokens, token_logprobs, top_logprobs, text_offset } = choice.logprobs;
  for (const list of [tokens, token_logprobs, top_logprobs, text_offset]) assert.equal(list.length, prompt.length);
  assert.equal(tokens.join(''), choice.text);
  assert.equal(token_logprobs[0], null);
  assert.equal(top_logprobs[0], null);
  for (let i = 1; i < prompt.length; ++i) {
    assert.ok(token_logprobs[i] <= 0);
    assert.equal(Object.keys(top_logprobs[i]).length, 1);
    assert.ok(text_offset[i] >= text_offset[i - 1]);
  }
});

test('errors arrive as the SDK\'s typed errors', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: user('hi'), max_tokens: 1 }),
    (error) => error instanceof OpenAI.NotFoundError && error.status === 404 && error.code === 'model_not_found');
  await assert.rejects(
    client.chat.completions.create({ model: modelName, messages: user('hi'), max_tokens: 100000000 }),
    (error) => error instanceof OpenAI.BadRequestError && error.code === 'context_length_exceeded');
  await assert.rejects(
    client.completions.create({ model: modelName, prompt: [0, 1 << 30], max_tokens: 1 }),
    (error) => error instanceof OpenAI.BadRequestError && error.param === 'prompt');
  await assert.rejects(
    client.chat.completions.create({ model: modelName, messages: user('hi'), max_tokens: 1,
                                     response_format: { type: 'json_object' } }),
    (error) => error instanceof OpenAI.BadRequestError && error.param === 'response_format');
  await assert.rejects(
    client.chat.completions.create({ model: modelName, messages: user('hi'), max_tokens: 1, tools: [weatherTool],
                                     tool_choice: 'required' }),
    (error) => error instanceof OpenAI.BadRequestError && /[Tt]hinking mode/.test(error.message));
});

// The Responses API: `responses.create` with and without `stream: true`, and `responses.stream`,
// whose accumulator throws on any event that does not fit its snapshot.
const responsesRequest = { model: modelName, input: 'Hello there', max_output_tokens: 8, temperature: 0 };

function checkResponsesUsage(usage) {
  assert.ok(usage.input_tokens > 0);
  assert.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens);
  assert.ok(usage.input_tokens_details.cached_tokens <= usage.input_tokens);
  assert.ok(usage.output_tokens_details.reasoning_tokens <= usage.output_tokens);
}

// Iterates a `stream: true` response, checking the numbering and collecting the deltas.
async function streamResponse(request) {
  const stream = await client.responses.create({ ...request, stream: true });
  const out = { types: [], text: '', reasoning: '', arguments: '', final: null };
  for await (const event of stream) {
    assert.equal(event.sequence_number, out.types.length);
    out.types.push(event.type);
    if (event.type === 'response.output_text.delta') out.text += event.delta;
    if (event.type === 'response.reasoning_text.delta') out.reasoning += event.delta;
    if (event.type === 'response.function_call_arguments.delta') out.arguments += event.delta;
    if (event.type === 'response.completed' || event.type === 'response.incomplete') out.final = event.response;
  }
  return out;
}

const reasoningText = (response) => response.output.filter((item) => item.type === 'reasoning')
  .flatMap((item) => item.content ?? []).map((part) => part.text).join('');

for (const [label, extra] of [['with reasoning', {}], ['without reasoning', { reasoning: { effort: 'none' } }]]) {
  test(`responses ${label}: streamed events rebuild the non-streaming response`, async () => {
    const request = { ...responsesRequest, ...extra };
    const whole = await client.responses.create(request);
    assert.equal(whole.object, 'response');
    assert.match(whole.id, /^resp_/);
    assert.ok(['completed', 'incomplete'].includes(whole.status), whole.status);
    if (whole.status === 'incomplete') {
      assert.equal(whole.incomplete_details.reason, 'max_output_tokens');
      assert.equal(whole.output.at(-1).status, 'incomplete');
    }
    assert.ok(whole.output.slice(0, -1).every((item) => item.status === 'completed'));
    checkResponsesUsage(whole.usage);
    if (extra.reasoning) {
      assert.ok(whole.output_text.length > 0);
      assert.equal(whole.usage.output_tokens_details.reasoning_tokens, 0);
    } else {
      assert.ok(reasoningText(whole).length > 0);
    }

    const streamed = await streamResponse(request);
    assert.deepEqual(streamed.types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(streamed.types.at(-1), whole.status === 'completed' ? 'response.completed' : 'response.incomplete');
    assert.equal(streamed.text, whole.output_text);
    assert.equal(streamed.reasoning, reasoningText(whole));
    assert.deepEqual(streamed.final.usage.output_tokens_details, whole.usage.output_tokens_details);
    assert.equal(streamed.final.usage.output_tokens, whole.usage.output_tokens);

    // The SDK's own accumulator: every event must apply to its snapshot.
    const runner = client.responses.stream(request);
    let textDeltas = '';
    runner.on('response.output_text.delta', (event) => { textDeltas += event.delta; });
    const final = await runner.finalResponse();
    assert.equal(final.output_text, whole.output_text);
    assert.equal(textDeltas, whole.output_text);
    assert.equal(reasoningText(final), reasoningText(whole));
    assert.deepEqual(final.output.map((item) => item.type), whole.output.map((item) => item.type));
  });
}

test('responses tools round trip: a function_call and its output in the input', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Current weather in a city',
                   parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
  const input = [
    { role: 'user', content: 'Weather in Paris?' },
    { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temperature_c": 21}' },
  ];
  const request = { model: modelName, input, tools, max_output_tokens: 10, temperature: 0,
                    reasoning: { effort: 'none' } };
  const whole = await client.responses.create(request);
  checkResponsesUsage(whole.usage);
  const bare = await client.responses.create({ ...request, input: input.slice(0, 1), max_output_tokens: 1 });
  assert.ok(whole.usage.input_tokens > bare.usage.input_tokens + 10, 'the call and its output reach the prompt');
  for (const item of whole.output.filter((entry) => entry.type === 'function_call')) {
    assert.match(item.call_id, /^call_/);
    assert.equal(typeof item.arguments, 'string');
  }
  const final = await client.responses.stream(request).finalResponse();
  assert.equal(final.output_text, whole.output_text);
  assert.deepEqual(final.output.filter((item) => item.type === 'function_call').map((item) => [item.name, item.arguments]),
                   whole.output.filter((item) => item.type === 'function_call').map((item) => [item.name, item.arguments]));
});

test('responses errors arrive as the SDK\'s typed errors', async () => {
  await assert.rejects(
    client.responses.create({ model: modelName, input: 'hi', max_output_tokens: 0 }),
    (error) => error instanceof OpenAI.BadRequestError && error.param === 'max_output_tokens');
  await assert.rejects(
    client.responses.create({ model: 'no-such-model', input: 'hi', stream: true }),
    (error) => error instanceof OpenAI.NotFoundError && error.code === 'model_not_found');
});
