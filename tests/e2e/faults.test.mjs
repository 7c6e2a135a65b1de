// The fault path end to end: a backend step that fails (the fault-injecting
// backend, engine/be_fault.h: `--fault-token-id N` fails every step whose
// batch holds token N) ends its requests with an OpenAI error object, or an
// SSE error event once the stream has begun; the engine keeps serving, its
// KV cache returns to idle, and /metrics counts finished_reason="error".
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon, offline, post, sseEvents } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const MODEL = `${FIXTURES}/tiny`;
const POISON = 300; // in the tiny model's vocabulary (384)

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`inferd:${name}`));
  return line ? Number(line.split(' ').at(-1)) : NaN;
}

async function idle(base) {
  for (let i = 0; i < 200; i++) {
    if ((await metric(base, 'num_requests_running')) === 0 && (await metric(base, 'kv_cache_usage_perc')) === 0) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe('a failing backend step (--fault-token-id)', () => {
  let d, client;
  before(async () => {
    d = await startDaemon(MODEL, ['--fault-token-id', String(POISON)]);
    client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  after(async () => { await d.stop(); });

  test('a request whose prompt holds the token gets a 500 error object; the next one is served exactly', async () => {
    const errors0 = await metric(d.base, 'request_success_total{model_name="' + MODEL + '",finished_reason="error"}');
    const r = await post(d.base, '/v1/completions', { prompt: [1, 5, POISON, 7], max_tokens: 4 });
    assert.equal(r.status, 500);
    assert.equal(r.json.error.type, 'internal_error');
    assert.match(r.json.error.message, /backend step failed/);
    await assert.rejects(client.completions.create({ model: MODEL, prompt: [1, POISON], max_tokens: 2 }),
      (e) => e instanceof OpenAI.InternalServerError);
    const want = offline(MODEL, 'Once upon a time', 12);
    const ok = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
    assert.equal(ok.choices[0].text, want);
    assert.ok(await idle(d.base), 'KV usage and running requests back to zero');
    const errors1 = await metric(d.base, 'request_success_total{model_name="' + MODEL + '",finished_reason="error"}');
    assert.equal(errors1 - errors0, 2);
  });

  test('mid-stream: chunks, then an SSE error event (the SDK raises it); n > 1 fails every choice of the step', async () => {
    // logit_bias makes the token the first output: streamed, then the step
    // that feeds it back fails
    const r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 8, stream: true, logit_bias: { [POISON]: 100 } });
    assert.equal(r.status, 200);
    const ev = sseEvents(r.text);
    const errs = ev.filter((e) => e !== '[DONE]' && e.error);
    assert.equal(errs.length, 1, r.text);
    assert.equal(errs[0].error.type, 'internal_error');
    assert.ok(ev.findIndex((e) => e.error) > 0, 'the error comes after the first chunk');
    const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, stream: true, logit_bias: { [POISON]: 100 } });
    await assert.rejects((async () => { for await (const _ of stream) { /* drain */ } })(), (e) => e instanceof OpenAI.APIError);
    const many = await post(d.base, '/v1/completions', { prompt: [1, POISON], max_tokens: 3, n: 3 });
    assert.equal(many.status, 500);
    assert.ok(await idle(d.base));
  });

  test('requests beside failing ones: those not in a failed step finish with the text they get alone', async () => {
    const prompts = ['Once upon a time', 'The cat', 'A little girl', 'One day'];
    const want = prompts.map((p) => offline(MODEL, p, 16));
    const good = prompts.map((p) => client.completions.create({ model: MODEL, prompt: p, max_tokens: 16, temperature: 0 }).then((r) => r.choices[0].text, (e) => e));
    const bad = [0, 1, 2].map(() => post(d.base, '/v1/completions', { prompt: [1, POISON], max_tokens: 3 }));
    const got = await Promise.all(good);
    for (const b of await Promise.all(bad)) assert.equal(b.status, 500);
    // a good request that shared a step with a failing one fails with it (a
    // failed step's sequences cannot be told apart); every other one is exact
    got.forEach((g, i) => {
      if (g instanceof Error) assert.ok(g instanceof OpenAI.InternalServerError, String(g));
      else assert.equal(g, want[i]);
    });
    const again = await Promise.all(prompts.map((p) => client.completions.create({ model: MODEL, prompt: p, max_tokens: 16, temperature: 0 })));
    again.forEach((r, i) => assert.equal(r.choices[0].text, want[i]));
    assert.ok(await idle(d.base));
  });

  test('an out-of-vocabulary --fault-token-id fails start-up', async () => {
    await assert.rejects(startDaemon(MODEL, ['--fault-token-id', '100000']), /outside the vocabulary/);
  });
});
