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

  test('store, previous_response_id, tools and bad input are 400s', async () => {
    for (const body of [
      { input: 'x', store: true },
      { input: 'x', previous_response_id: 'resp_1' },
      { input: 'x', tools: [{ type: 'function', name: 'f', parameters: {} }] },
      { input: 42 },
      { input: [{ type: 'function_call_output', call_id: 'c', output: 'x' }] },
      {},
    ]) {
      const r = await post(d.base, '/v1/responses', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
  });
});
