// POST /v1/responses (OpenAI's Responses API, stateless) end to end through
// the official SDK's client.responses.create and .stream: the same greedy
// text as /v1/chat/completions for the same conversation, the typed stream
// events, max_output_tokens, and the 400s for stored responses.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon, post } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const model = `${FIXTURES}/tiny`;

// The plain API on the random fixture and on the embedded real model
// (models/stories260K, the one make run falls back to): real text, the same
// as chat's for the same messages.
for (const model of [`${FIXTURES}/tiny`, 'models/stories260K']) {
describe(`Responses API on ${model}`, () => {
  let d, client;
  before(async () => {
    d = await startDaemon(model);
    client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await d.stop(); });

  const chat = async (messages, max) => (await client.chat.completions.create({
    model, messages, max_tokens: max, temperature: 0 })).choices[0];

  test('input string and instructions give the chat output for the same messages', async () => {
    const r = await client.responses.create({ model, input: 'Once upon a time', instructions: 'Be brief.',
      max_output_tokens: 12, temperature: 0 });
    const want = await chat([{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Once upon a time' }], 12);
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.output_text, want.message.content);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.equal(r.status, want.finish_reason === 'length' ? 'incomplete' : 'completed');
    if (r.status === 'incomplete') assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.ok(r.usage.output_tokens >= 1 && r.usage.output_tokens <= 12);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  });

  test('a message list with input_text parts maps onto chat messages', async () => {
    const input = [
      { role: 'user', content: [{ type: 'input_text', text: 'hello' }] },
      { role: 'assistant', content: 'hi' },
      { type: 'message', role: 'user', content: 'The cat' },
    ];
    const r = await client.responses.create({ model, input, max_output_tokens: 8, temperature: 0 });
    const want = await chat([{ role: 'user', content: 'hello' }, { role: 'assistant', content: 'hi' },
      { role: 'user', content: 'The cat' }], 8);
    assert.equal(r.output_text, want.message.content);
  });

  test('stream: created, text deltas that add up, completed with the whole response', async () => {
    const want = await client.responses.create({ model, input: 'The cat', max_output_tokens: 10, temperature: 0 });
    const stream = await client.responses.create({ model, input: 'The cat', max_output_tokens: 10,
      temperature: 0, stream: true });
    const types = [];
    let text = '', final = null, seq = -1;
    for await (const ev of stream) {
      types.push(ev.type);
      assert.equal(ev.sequence_number, seq + 1);
      seq = ev.sequence_number;
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') final = ev.response;
    }
    assert.equal(types[0], 'response.created');
    assert.ok(types.includes('response.output_text.delta'));
    assert.match(types.at(-1), /^response\.(completed|incomplete)$/);
    assert.equal(text, want.output_text);
    assert.equal(final.output[0].content[0].text, want.output_text);
    assert.equal(final.usage.output_tokens, want.usage.output_tokens);
  });

  test('client.responses.stream accumulates the same text', async () => {
    const want = await client.responses.create({ model, input: 'hello', max_output_tokens: 6, temperature: 0 });
    const stream = client.responses.stream({ model, input: 'hello', max_output_tokens: 6, temperature: 0 });
    let deltas = '';
    stream.on('response.output_text.delta', (ev) => { deltas += ev.delta; });
    const final = await stream.finalResponse();
    assert.equal(deltas, want.output_text);
    assert.equal(final.output[0].content[0].text, want.output_text); // the SDK sets output_text only on create
  });

  test('store, previous_response_id, other tool types and bad input are 400s', async () => {
    for (const body of [
      { input: 'x', store: true },
      { input: 'x', previous_response_id: 'resp_1' },
      { input: 'x', tools: [{ type: 'web_search_preview' }] },
      { input: 42 },
      { input: [{ type: 'function_call_output', output: 'x' }] },
      { input: [{ type: 'reasoning', summary: [] }] },
      {},
    ]) {
      const r = await post(d.base, '/v1/responses', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
  });

  test('errors name the Responses fields, not chat\'s', async () => {
    const cases = [
      [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ input: 'x', max_output_tokens: 100000 }, 'input'], // past the context
      [{ input: [] }, 'input'],
      [{ input: 'x', text: { format: { type: 'yaml' } } }, 'text.format.type'],
    ];
    for (const [body, param] of cases) {
      await assert.rejects(client.responses.create({ model, ...body }), (e) => {
        assert.ok(e instanceof OpenAI.BadRequestError, String(e));
        assert.equal(e.param, param, e.message);
        assert.doesNotMatch(e.message, /max_tokens|messages|response_format/);
        return true;
      });
    }
  });
});
}

// text.format through the structured-output engine, function tools through
// the tool engine: on the random tiny model, whose free text is never JSON,
// the grammar alone makes it so.
const SCHEMA = { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'string', maxLength: 8 } },
  required: ['a', 'b'], additionalProperties: false };
const matches = (v) => v && typeof v === 'object' && !Array.isArray(v) && Number.isInteger(v.a) &&
  typeof v.b === 'string' && v.b.length <= 8 && Object.keys(v).sort().join() === 'a,b';
const TOOL = { type: 'function', name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false } };
const format = { format: { type: 'json_schema', name: 'thing', schema: SCHEMA, strict: true } };

describe(`Responses API structured output and tools on ${model}`, () => {
  let d, client;
  before(async () => {
    d = await startDaemon(model);
    client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await d.stop(); });

  test('text.format json_schema: create gives valid JSON matching the schema, as chat\'s response_format', async () => {
    for (const input of ['Once upon a time', 'hello', 'The cat']) {
      const r = await client.responses.create({ model, input, text: format, max_output_tokens: 60, temperature: 0 });
      assert.equal(r.status, 'completed');
      assert.ok(matches(JSON.parse(r.output_text)), r.output_text);
      const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: input }],
        max_tokens: 60, temperature: 0,
        response_format: { type: 'json_schema', json_schema: { name: 'thing', schema: SCHEMA, strict: true } } });
      assert.equal(r.output_text, c.choices[0].message.content);
    }
  });

  test('text.format json_object: valid JSON', async () => {
    const r = await client.responses.create({ model, input: 'hello', text: { format: { type: 'json_object' } },
      max_output_tokens: 60, temperature: 0 });
    if (r.status === 'completed') assert.equal(typeof JSON.parse(r.output_text), 'object');
    else assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  });

  test('text.format json_schema streamed: the deltas add up to the same valid JSON', async () => {
    const want = await client.responses.create({ model, input: 'The cat', text: format, max_output_tokens: 60, temperature: 0 });
    const stream = client.responses.stream({ model, input: 'The cat', text: format, max_output_tokens: 60, temperature: 0 });
    let deltas = '';
    stream.on('response.output_text.delta', (ev) => { deltas += ev.delta; });
    const final = await stream.finalResponse();
    assert.equal(deltas, want.output_text);
    assert.ok(matches(JSON.parse(deltas)), deltas);
    assert.equal(final.output[0].content[0].text, deltas);
  });

  test('tool_choice naming a function: a function_call item whose arguments match its parameters', async () => {
    const r = await client.responses.create({ model, input: 'Weather in Paris?', tools: [TOOL],
      tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 60, temperature: 0 });
    assert.equal(r.status, 'completed');
    assert.equal(r.output.length, 1, JSON.stringify(r.output));
    const call = r.output[0];
    assert.equal(call.type, 'function_call');
    assert.equal(call.name, 'get_weather');
    assert.match(call.call_id, /^call_/);
    assert.match(call.id, /^fc_/);
    assert.equal(call.status, 'completed');
    const args = JSON.parse(call.arguments);
    assert.deepEqual(Object.keys(args), ['city']);
    assert.equal(typeof args.city, 'string');
    assert.equal(r.output_text, '');
    // the same call as chat's named tool_choice
    const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ type: 'function', function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters } }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 60, temperature: 0 });
    assert.equal(call.arguments, c.choices[0].message.tool_calls[0].function.arguments);
  });

  test('tool_choice "required": one or more function_call items, each a listed tool', async () => {
    const r = await client.responses.create({ model, input: 'hello', tools: [TOOL], tool_choice: 'required',
      parallel_tool_calls: false, max_output_tokens: 80, temperature: 0 });
    if (r.status === 'incomplete') return assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1, JSON.stringify(r.output));
    assert.equal(calls[0].name, 'get_weather');
    assert.equal(typeof JSON.parse(calls[0].arguments).city, 'string');
  });

  test('a forced call streamed: output_item.added, argument deltas, .done events, then completed (client.responses.stream)', async () => {
    const body = { model, input: 'Weather in Paris?', tools: [TOOL],
      tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 60, temperature: 0 };
    const want = await client.responses.create(body);
    const raw = await client.responses.create({ ...body, stream: true });
    const types = [];
    let seq = -1, args = '';
    for await (const ev of raw) {
      types.push(ev.type);
      assert.equal(ev.sequence_number, seq + 1);
      seq = ev.sequence_number;
      if (ev.type === 'response.output_item.added') {
        assert.equal(ev.item.type, 'function_call');
        assert.equal(ev.item.name, 'get_weather');
        assert.equal(ev.item.arguments, '');
      }
      if (ev.type === 'response.function_call_arguments.delta') {
        assert.equal(ev.output_index, 0);
        assert.match(ev.item_id, /^fc_/);
        args += ev.delta;
      }
      if (ev.type === 'response.function_call_arguments.done') assert.equal(ev.arguments, args);
    }
    assert.deepEqual(types.filter((t, i) => t !== types[i - 1]), ['response.created', 'response.in_progress',
      'response.output_item.added', 'response.function_call_arguments.delta',
      'response.function_call_arguments.done', 'response.output_item.done', 'response.completed']);
    assert.equal(args, want.output[0].arguments);
    const stream = client.responses.stream(body);
    let deltas = '';
    stream.on('response.function_call_arguments.delta', (ev) => { deltas += ev.delta; });
    const final = await stream.finalResponse();
    assert.equal(deltas, args);
    assert.equal(final.output[0].type, 'function_call');
    assert.equal(final.output[0].arguments, args);
  });

  test('function_call and function_call_output input items continue a conversation as chat\'s tool turns', async () => {
    const input = [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ];
    const r = await client.responses.create({ model, input, tools: [TOOL], max_output_tokens: 8, temperature: 0 });
    const c = await client.chat.completions.create({ model, max_tokens: 8, temperature: 0,
      tools: [{ type: 'function', function: { name: TOOL.name, description: TOOL.description, parameters: TOOL.parameters } }],
      messages: [{ role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny' }] });
    assert.equal(r.output_text, c.choices[0].message.content);
    assert.equal(r.usage.input_tokens, c.usage.prompt_tokens);
  });
});

describe('Responses API: a step that fails mid-stream (--fault-token-id)', () => {
  const POISON = 300; // in the tiny model's vocabulary (384)
  let d, client;
  before(async () => {
    d = await startDaemon(model, ['--fault-token-id', String(POISON)]);
    client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await d.stop(); });

  test('a typed error event, then response.failed; the SDK raises it', async () => {
    // logit_bias makes the token the first output: streamed, then the step
    // that feeds it back fails
    const body = { model, input: 'Once', max_output_tokens: 8, stream: true, logit_bias: { [POISON]: 100 } };
    const r = await fetch(`${d.base}/v1/responses`, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body) });
    assert.equal(r.status, 200);
    const blocks = (await r.text()).split('\n\n').filter((b) => b.trim());
    const evs = blocks.map((b) => {
      const [ev, data] = b.split('\n');
      assert.match(ev, /^event: /, b); // every block typed, no bare data line
      const j = JSON.parse(data.slice(6));
      assert.equal(ev.slice(7), j.type);
      return j;
    });
    const types = evs.map((e) => e.type);
    assert.ok(types.includes('response.output_text.delta'), types.join());
    assert.deepEqual(types.slice(-2), ['error', 'response.failed']);
    const err = evs.at(-2);
    assert.match(err.message, /backend step failed/);
    assert.equal(typeof err.code, 'string');
    const failed = evs.at(-1).response;
    assert.equal(failed.status, 'failed');
    assert.match(failed.error.message, /backend step failed/);
    evs.forEach((e, i) => assert.equal(e.sequence_number, i));
    const stream = client.responses.stream({ ...body, stream: undefined });
    await assert.rejects(stream.finalResponse(), (e) => e instanceof OpenAI.APIError && /backend step failed/.test(e.message));
  });
});
