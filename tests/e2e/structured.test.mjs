// Structured outputs end to end with the openai SDK on a random-weight model
// sampled at temperature 1: whatever it writes must still match. zod schema
// through client.chat.completions.parse, regex and choice (vLLM's fields),
// json_object, 32 concurrent requests, speculative decoding on; bad schemas,
// grammars and regexes are 400s naming the part.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { startDaemon, post } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const model = `${FIXTURES}/tiny`;

// Bounded on purpose: a random model ends a string only when the grammar
// leaves it nothing else, so every field has a length or value limit.
const Person = z.object({
  name: z.string().max(6),
  age: z.number().int().min(0).max(120),
  pet: z.enum(['cat', 'dog', 'none']),
  ok: z.boolean(),
  tags: z.array(z.enum(['a', 'b'])).max(3),
});

const regex = '[A-Z]{2}-\\d{3}( (red|blue))?';
const choices = ['yes', 'no', 'maybe later'];

async function checks(d, n) {
  const client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  const jobs = [];
  for (let i = 0; i < n; i++) {
    jobs.push((async () => {
      const r = await client.beta.chat.completions.parse({ // openai 4.x: under beta
        model, messages: [{ role: 'user', content: `person ${i}` }], temperature: 1, seed: i,
        max_tokens: 200, response_format: zodResponseFormat(Person, 'person'),
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'stop', c.message.content);
      assert.ok(c.message.parsed, c.message.content); // the SDK parsed it with zod
      Person.parse(c.message.parsed);
    })());
    jobs.push((async () => {
      const r = await post(d.base, '/v1/completions', {
        prompt: `code ${i}`, temperature: 1, seed: i, max_tokens: 50, structured_outputs: { regex },
      });
      assert.equal(r.status, 200, r.text);
      assert.match(r.json.choices[0].text, new RegExp(`^(?:${regex})$`));
      assert.equal(r.json.choices[0].finish_reason, 'stop');
    })());
    jobs.push((async () => {
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: 'ok?' }], temperature: 1, seed: i, max_tokens: 20,
        guided_choice: choices,
      });
      assert.ok(choices.includes(r.choices[0].message.content), r.choices[0].message.content);
    })());
  }
  await Promise.all(jobs);
}

describe('structured outputs', () => {
  let d;
  before(async () => { d = await startDaemon(model); });
  after(async () => { await d?.stop(); });

  test('zod schema, regex and choice at temperature 1, 32 concurrent', async () => {
    await checks(d, 32);
  });

  // scripts/gpu-check runs this suite on --device cuda: there every step of
  // these requests (no logprobs, no processor but the grammar) is sampled on
  // the device, the grammar's mask with its row; the CPU samples none there.
  test('the grammar masks went to the device sampler on CUDA, and nowhere on the CPU', async () => {
    const m = await (await fetch(`${d.base}/metrics`)).text();
    const r = new RegExp('^inferd:device_sampled_tokens_total\\{[^}]*\\} (\\S+)$', 'm').exec(m);
    assert.ok(r, 'inferd:device_sampled_tokens_total is missing');
    if (process.env.INFERD_E2E_DEVICE === 'cuda') assert.ok(Number(r[1]) > 0, m);
    else assert.equal(Number(r[1]), 0);
  });

  test('json_object starts an object and, when it ends, is one', async () => {
    for (let i = 0; i < 4; i++) {
      const r = await post(d.base, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'json' }], temperature: 1, seed: i, max_tokens: 200,
        response_format: { type: 'json_object' },
      });
      assert.equal(r.status, 200, r.text);
      const c = r.json.choices[0];
      assert.match(c.message.content, /^\{/);
      if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
    }
  });

  test('streaming gives the same constrained text', async () => {
    const body = { prompt: 'x', temperature: 0, max_tokens: 50, guided_regex: regex };
    const whole = await post(d.base, '/v1/completions', body);
    const streamed = await post(d.base, '/v1/completions', { ...body, stream: true });
    const text = streamed.text.split('\n\n').filter((b) => b.startsWith('data: {'))
      .map((b) => JSON.parse(b.slice(6)).choices[0]?.text ?? '').join('');
    assert.equal(text, whole.json.choices[0].text);
    assert.match(text, new RegExp(`^(?:${regex})$`));
  });

  test('what cannot be compiled is a 400 naming the part', async () => {
    const cases = [
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', strict: true, schema: { type: 'object', properties: { a: { type: 'string', not: {} } } } } } },
        'response_format.json_schema.schema', "#/properties/a: unsupported keyword 'not'"],
      [{ guided_grammar: 'root ::= "a" (' }, 'guided_grammar', 'line 1'],
      [{ structured_outputs: { regex: 'a(b' } }, 'structured_outputs.regex', 'missing closing parenthesis'],
      [{ guided_json: { type: 'integer', minimum: 3, maximum: 1 } }, 'guided_json', 'no integer'],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { $ref: '#/$defs/nope' } } } },
        'response_format.json_schema.schema', '#/$defs/nope'],
      [{ guided_regex: 'a', guided_choice: ['a'] }, 'guided_regex', 'only one of'],
    ];
    for (const [extra, param, needle] of cases) {
      const r = await post(d.base, '/v1/completions', { prompt: 'x', max_tokens: 5, ...extra });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param, r.text);
      assert.ok(r.json.error.message.includes(needle), r.json.error.message);
    }
  });
});

describe('structured outputs with speculative decoding', () => {
  let d;
  before(async () => {
    d = await startDaemon(model, ['--speculative-config',
      '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1}']);
  });
  after(async () => { await d?.stop(); });

  test('outputs still match (n-gram drafts rolled back through the grammar)', async () => {
    await checks(d, 8);
  });
});

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object', additionalProperties: false, required: ['city', 'unit'],
      properties: { city: { type: 'string', maxLength: 8 }, unit: { type: 'string', enum: ['c', 'f'] } },
    },
  },
};
const clock = { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {}, additionalProperties: false } } };

function checkArgs(call) {
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.deepEqual(Object.keys(args), ['city', 'unit']);
    assert.ok(args.city.length <= 8 && ['c', 'f'].includes(args.unit), call.function.arguments);
  } else {
    assert.equal(call.function.name, 'now');
    assert.deepEqual(args, {});
  }
}

// The tool calls of a streamed chat, put together as OpenAI's clients do.
function collectCalls(events) {
  const calls = [];
  for (const e of events) {
    for (const t of e.choices?.[0]?.delta?.tool_calls ?? []) {
      if (t.id) calls[t.index] = { id: t.id, function: { name: t.function.name, arguments: '' } };
      calls[t.index].function.arguments += t.function.arguments ?? '';
    }
  }
  return calls;
}

describe('tool calls', () => {
  let d;
  before(async () => { d = await startDaemon(model, ['--tool-call-parser', 'hermes', '--enable-auto-tool-choice']); });
  after(async () => { await d?.stop(); });

  test('named and required tool_choice give valid calls, streamed and not', async () => {
    const client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    for (let i = 0; i < 6; i++) {
      for (const choice of [{ type: 'function', function: { name: 'get_weather' } }, 'required']) {
        const body = { model, messages: [{ role: 'user', content: 'weather?' }], temperature: 1, seed: i,
          max_tokens: 240, tools: [weather, clock], tool_choice: choice,
          // a random model rarely closes a list it may extend: one call each
          parallel_tool_calls: false };
        const r = await client.chat.completions.create(body);
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
        assert.equal(c.message.content, null);
        assert.equal(c.message.tool_calls.length, 1);
        if (choice !== 'required') assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
        c.message.tool_calls.forEach(checkArgs);
        const ids = new Set(c.message.tool_calls.map((t) => t.id));
        assert.equal(ids.size, c.message.tool_calls.length);

        const stream = await client.chat.completions.create({ ...body, stream: true });
        const events = [];
        for await (const e of stream) events.push(e);
        const calls = collectCalls(events);
        assert.equal(events.at(-1).choices[0].finish_reason, 'tool_calls');
        assert.deepEqual(calls.map((t) => [t.function.name, t.function.arguments]),
          c.message.tool_calls.map((t) => [t.function.name, JSON.stringify(JSON.parse(t.function.arguments))]).map(
            ([n, a], k) => [n, choice === 'required' ? a : c.message.tool_calls[k].function.arguments]));
      }
    }
  });

  test('bad tool requests are 400s naming the field', async () => {
    const cases = [
      [{ tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', 'not in tools'],
      [{ tools: [{ type: 'function', function: { name: 'bad name' } }] }, 'tools', 'letters'],
      [{ tools: [weather], tool_choice: 'required', response_format: { type: 'json_object' } }, 'tool_choice', 'cannot be combined'],
      [{ tool_choice: 'required' }, 'tool_choice', 'needs tools'],
    ];
    for (const [extra, param, needle] of cases) {
      const r = await post(d.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 5, ...extra });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param, r.text);
      assert.ok(r.json.error.message.includes(needle), r.json.error.message);
    }
  });
});

describe('tool-call flags', () => {
  test('"auto" without --enable-auto-tool-choice is a 400 (tools alone are only rendered); an unknown parser stops start-up', async () => {
    const d = await startDaemon(model);
    try {
      const r = await post(d.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 5, tools: [weather], tool_choice: 'auto' });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /--enable-auto-tool-choice/);
      const plain = await post(d.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], max_tokens: 5, tools: [weather] });
      assert.equal(plain.status, 200, plain.text);
      assert.equal(plain.json.choices[0].message.tool_calls, undefined);
    } finally {
      await d.stop();
    }
    await assert.rejects(startDaemon(model, ['--tool-call-parser', 'hermes2']), /unknown tool-call parser 'hermes2'/);
  });
});
