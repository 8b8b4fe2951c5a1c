// Structured output, end to end, validated by peers: 1,000 sampled completions (/v1/completions,
// which takes logit_bias as OpenAI's legacy endpoint does; temperature 1,
// the random-weight model, so the weights never help; JSON answers get a logit bias toward the
// tokens that close strings and containers, or random weights would write free strings until
// max_tokens: the grammar still decides which tokens are allowed) through the `openai` SDK under 30 JSON
// schemas from JSONSchemaBench's dev split (../shared/structured beside the checkout) and 10
// regular expressions and GBNF grammars. Every answer that ends with finish_reason "stop" must be
// valid: the JSON by `ajv` (npm), the others by a JavaScript RegExp for the same language; an
// answer cut by max_tokens must say "length". Schemas the server refuses (400, a keyword it
// cannot enforce) or ajv cannot compile are skipped for the next ones in the file.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { modelName, repoRoot, requirePackages, startServer } from './server.mjs';

await requirePackages('openai', '@anthropic-ai/sdk', 'ajv');
const { default: OpenAI } = await import('openai');
const { default: Anthropic } = await import('@anthropic-ai/sdk');
const { default: Ajv } = await import('ajv');
const { default: Ajv2020 } = await import('ajv/dist/2020.js');
const { default: Ajv2019 } = await import('ajv/dist/2019.js');

const devSet = path.join(repoRoot, '..', 'shared', 'structured', 'jsonschemabench_dev.jsonl.xz');
const completions = Number(process.env.DEEPINFER_STRUCTURED_COMPLETIONS ?? 1000);
const schemaCount = 30;

// Regular languages, each as the server's constraint and as a JavaScript RegExp.
const textConstraints = [
  { structured_outputs: { regex: '[0-9]{3}-[0-9]{4}' }, check: /^[0-9]{3}-[0-9]{4}$/ },
  { structured_outputs: { regex: '(yes|no|maybe)!?' }, check: /^(yes|no|maybe)!?$/ },
  { structured_outputs: { regex: '[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}' }, check: /^[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,2}$/ },
  { structured_outputs: { regex: '#[0-9a-f]{6}' }, check: /^#[0-9a-f]{6}$/ },
  { structured_outputs: { regex: '(0|[1-9][0-9]*)\\.[0-9]{2}' }, check: /^(0|[1-9][0-9]*)\.[0-9]{2}$/ },
  { structured_outputs: { choice: ['red', 'green', 'blue'] }, check: /^(red|green|blue)$/ },
  { structured_outputs: { grammar: 'root ::= "(" [a-z]+ ")"' }, check: /^\([a-z]+\)$/ },
  { structured_outputs: { grammar: 'root ::= item ("," item){0,3}\nitem ::= [0-9]{1,2}' }, check: /^[0-9]{1,2}(,[0-9]{1,2}){0,3}$/ },
  { structured_outputs: { grammar: 'root ::= ("ab" | "cd")+ "."' }, check: /^(ab|cd)+\.$/ },
  { regex: '[a-z]+@[a-z]+\\.(com|org)', check: /^[a-z]+@[a-z]+\.(com|org)$/ },
];

// The validator for a schema in its own draft (ajv's default class is draft 7).
function validatorFor(schema) {
  const declared = typeof schema === 'object' && schema !== null ? String(schema.$schema ?? '') : '';
  if (declared.includes('draft-04') || declared.includes('draft-03')) return null;  // not ajv 8's
  const Class = declared.includes('2020-12') ? Ajv2020 : declared.includes('2019-09') ? Ajv2019 : Ajv;
  try {
    return new Class({ strict: false, validateFormats: false, allErrors: false }).compile(schema);
  } catch {
    return null;
  }
}

let server;
let client;
let anthropic;
before(async () => {
  server = await startServer(['--max-running', '32']);
  client = new OpenAI({ baseURL: `${server.baseUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
  anthropic = new Anthropic({ baseURL: server.baseUrl, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
});
after(async () => {
  if (server) assert.equal(await server.stop(), 0, 'SIGTERM exits 0');
});

// Random weights write long free strings (a closing quote is one token in dozens), so JSON gets
// more room than the short regular languages, and `bias`.
async function complete(constraint, seed, maxTokens, bias = undefined) {
  const body = {
    model: modelName,
    prompt: 'The answer, in the required format:',
    temperature: 1,
    seed,
    max_tokens: maxTokens,
    ...(bias ? { logit_bias: bias } : {}),
    ...constraint,
  };
  const response = await client.completions.create(body);
  const choice = response.choices[0];
  return { text: choice.text ?? '', finish: choice.finish_reason };
}

test('1,000 constrained completions are valid or cut by max_tokens', { timeout: 900000 }, async (t) => {
  if (!existsSync(devSet)) {
    t.skip(`${devSet} is missing (../shared beside the checkout)`);
    return;
  }
  const lines = execFileSync('xz', ['-dc', devSet], { maxBuffer: 1 << 28 }).toString().split('\n').filter(Boolean);
  const constraints = [];
  let refused = 0;
  for (const line of lines) {
    if (constraints.filter((c) => c.validate).length === schemaCount) break;
    const record = JSON.parse(line);
    const validate = validatorFor(record.schema);
    if (!validate) continue;
    // strict: no keys beyond `properties` (OpenAI's strict mode), or random weights would add
    // free-form keys for ever; the answer is still an instance of the schema as written.
    const constraint = { response_format: { type: 'json_schema', json_schema: { name: 's', schema: record.schema, strict: true } } };
    try {
      await complete(constraint, 0, 1);  // refused schemas fail here with a 400
    } catch (error) {
      assert.equal(error.status, 400, `${record.id}: ${error.message}`);
      ++refused;
      continue;
    }
    constraints.push({ id: record.id, constraint, validate });
  }
  assert.equal(constraints.length, schemaCount, 'not enough schemas compiled');
  for (const text of textConstraints) {
    const { check, ...constraint } = text;
    constraints.push({ id: JSON.stringify(constraint), constraint, check });
  }

  // The ids of single-token closers and short values, pushed up by 11: random logits spread the
  // mass over ~129,000 tokens, so e^11 (about 60,000 times as likely) makes each a fair chance.
  const bias = {};
  for (const piece of ['"', '}', ']', '",', '"}', '"]', '}}', ']}', '},', '}]', '0', '1', 'true', 'null']) {
    const response = await fetch(`${server.baseUrl}/tokenize`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: modelName, prompt: piece, add_special_tokens: false }),
    });
    const { tokens } = await response.json();
    if (tokens.length === 1) bias[tokens[0]] = 11;
  }
  assert.ok(Object.keys(bias).length >= 6, 'the closers did not tokenize');
  const jobs = [];
  for (let i = 0; i < completions; ++i) jobs.push({ target: constraints[i % constraints.length], seed: 1 + i });
  const tally = { stop: 0, length: 0, json_stop: 0 };
  const invalid = [];
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) {
      const { target, seed } = jobs[next++];
      const { text, finish } =
          await complete(target.constraint, seed, target.validate ? 256 : 48, target.validate ? bias : undefined);
      if (finish === 'length') {
        ++tally.length;
        continue;
      }
      assert.equal(finish, 'stop', `${target.id}: finish_reason ${finish}`);
      ++tally.stop;
      if (target.validate) ++tally.json_stop;
      let valid;
      if (target.validate) {
        let value;
        try {
          value = JSON.parse(text);
          valid = target.validate(value);
        } catch {
          valid = false;
        }
      } else {
        valid = target.check.test(text);
      }
      if (!valid) invalid.push(`${target.id} (seed ${seed}): ${JSON.stringify(text).slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  console.log(`structured output: ${completions} completions under ${constraints.length} constraints ` +
              `(${refused} schemas refused on the way): ${tally.stop} stopped (${tally.json_stop} of them JSON), ` +
              `${tally.length} cut by max_tokens, ${invalid.length} invalid`);
  assert.deepEqual(invalid, [], 'answers outside their constraint');
  // Enough answers ended for the check to mean something, JSON ones included.
  assert.ok(tally.stop > completions / 5, `only ${tally.stop} answers ended`);
  assert.ok(tally.json_stop > completions / 20, `only ${tally.json_stop} JSON answers ended`);
});

// Tool parameters for the constrained tool calls below: bounded so random weights can finish a
// call (free strings would run to max_tokens), and covering what the DSML encoding splits
// (string="true" raw strings, string="false" JSON), nested objects, arrays, $ref and a property
// that takes a string or a number.
const toolSchemas = [
  { type: 'object', properties: { unit: { enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['unit', 'days'], additionalProperties: false },
  { type: 'object', properties: { day: { type: 'string', format: 'date' }, note: { type: 'string', maxLength: 4 } },
    required: ['day'] },
  { type: 'object', properties: { point: { $ref: '#/$defs/point' }, zoom: { type: 'number', minimum: 0, maximum: 20 } },
    required: ['point'], $defs: { point: { type: 'object', properties: { x: { type: 'integer', minimum: -9, maximum: 9 },
                                                                        y: { type: 'integer', minimum: -9, maximum: 9 } },
                                           required: ['x', 'y'], additionalProperties: false } } },
  { type: 'object', properties: { ids: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 99 }, minItems: 1, maxItems: 3 },
                                  label: { anyOf: [{ type: 'string', pattern: '^[a-z]{1,3}$' }, { type: 'integer', minimum: 0, maximum: 9 }] },
                                  flag: { type: 'boolean' } },
    required: ['ids', 'label'] },
];

test('constrained tool calls through both SDKs have arguments valid by ajv', { timeout: 600000 }, async () => {
  const validators = toolSchemas.map((schema) => new Ajv({ strict: false, validateFormats: false }).compile(schema));
  const dateLike = /^[0-9]{4}-[0-9]{2}-[0-9]{2}$/;  // ajv's formats package is not installed
  const tally = { calls: 0, cut: 0 };
  const invalid = [];
  const check = (index, input, where) => {
    ++tally.calls;
    const valid = validators[index](input) && (index !== 1 || dateLike.test(input.day));
    if (!valid) invalid.push(`${where}: ${JSON.stringify(input).slice(0, 200)}`);
  };
  const tools = toolSchemas.map((parameters, i) => ({ type: 'function', function: { name: `tool_${i}`, parameters, strict: true } }));
  const jobs = [];
  for (let seed = 1; seed <= 24; ++seed) {
    const i = seed % toolSchemas.length;
    jobs.push(async () => {  // named (one call of tool i) or required (calls of any tool)
      const named = seed % 2 === 0;
      const response = await client.chat.completions.create({
        model: modelName, messages: [{ role: 'user', content: 'Call a tool.' }], thinking: { type: 'disabled' },
        temperature: 1, seed, max_tokens: 400, tools,
        tool_choice: named ? { type: 'function', function: { name: `tool_${i}` } } : 'required' });
      const [choice] = response.choices;
      if (choice.finish_reason === 'length') return void ++tally.cut;
      assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
      if (named) assert.equal(choice.message.tool_calls.length, 1);
      for (const call of choice.message.tool_calls) {
        const index = Number(call.function.name.slice('tool_'.length));
        if (named) assert.equal(index, i);
        check(index, JSON.parse(call.function.arguments), `chat seed ${seed} ${call.function.name}`);
      }
    });
    jobs.push(async () => {  // Anthropic: a strict tool forced by name
      const message = await anthropic.messages.create({
        model: modelName, messages: [{ role: 'user', content: 'Call a tool.' }], thinking: { type: 'disabled' },
        temperature: 1, max_tokens: 400,
        tools: toolSchemas.map((input_schema, k) => ({ name: `tool_${k}`, input_schema, strict: true })),
        tool_choice: { type: 'tool', name: `tool_${i}` } });
      if (message.stop_reason === 'max_tokens') return void ++tally.cut;
      assert.equal(message.stop_reason, 'tool_use', JSON.stringify(message));
      for (const block of message.content.filter((b) => b.type === 'tool_use')) check(i, block.input, `messages tool_${i}`);
    });
  }
  let next = 0;
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next < jobs.length) await jobs[next++]();
  }));
  console.log(`constrained tool calls: ${tally.calls} calls checked, ${tally.cut} answers cut by max_tokens, ` +
              `${invalid.length} invalid`);
  assert.deepEqual(invalid, [], 'arguments outside their schema');
  assert.ok(tally.calls >= jobs.length / 2, `only ${tally.calls} calls ended`);
  // A strict tool whose schema cannot be enforced is refused, with the field.
  await assert.rejects(
    client.chat.completions.create({ model: modelName, messages: [{ role: 'user', content: 'x' }], max_tokens: 1,
                                     tools: [{ type: 'function', function: { name: 'f', strict: true,
                                                                              parameters: { type: 'object', properties: { xs: { type: 'array', uniqueItems: true } } } } }] }),
    (error) => error.status === 400 && error.param === 'tools.0.function.parameters' && /uniqueItems/.test(error.message));
});
