// The OpenAI-compatible API end to end: the real daemon, the official
// `openai` SDK and raw HTTP. Runs on the project's own tiny model (always)
// and on ../shared/models/stories260K when present.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import { startDaemon, offline, post, sseEvents } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const models = [`${FIXTURES}/tiny`];
if (fs.existsSync('../shared/models/stories260K')) models.push('../shared/models/stories260K');
else console.log('# skipped: ../shared/models/stories260K not present (real-model API tests)');

for (const model of models) {
  describe(`API on ${model}`, () => {
    let d, client;
    before(async () => {
      d = await startDaemon(model);
      client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    });
    after(async () => { await d.stop(); });

    test('models lists the model as given, with max_model_len', async () => {
      const list = await client.models.list();
      assert.equal(list.data.length, 1);
      assert.equal(list.data[0].id, model);
      assert.equal(list.data[0].object, 'model');
      const raw = await (await fetch(`${d.base}/v1/models`)).json();
      assert.ok(raw.data[0].max_model_len > 0);
    });

    test('greedy completion equals the offline generator', async () => {
      const prompt = 'Once upon a time';
      const want = offline(model, prompt, 24);
      const r = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
      assert.equal(r.object, 'text_completion');
      assert.match(r.id, /^cmpl-/);
      assert.equal(r.choices[0].text, want);
      assert.equal(r.choices[0].finish_reason, 'length');
      assert.equal(r.usage.completion_tokens, 24);
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
    });

    test('EOS ends a sequence (counted, no text); min_tokens holds it off; stop_token_ids stop too', async () => {
      const cfg = JSON.parse(fs.readFileSync(`${model}/config.json`, 'utf8'));
      const eos = [].concat(cfg.eos_token_id)[0];
      const force = (id) => ({ [id]: 100 }); // logit_bias makes id the argmax
      let r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 10, temperature: 0, logit_bias: force(eos) });
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.equal(r.json.choices[0].text, '');
      assert.equal(r.json.usage.completion_tokens, 1);
      r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 10, temperature: 0, logit_bias: force(eos), min_tokens: 3 });
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.equal(r.json.usage.completion_tokens, 4); // three others, then EOS
      r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 10, temperature: 0, logit_bias: force(eos), ignore_eos: true });
      assert.equal(r.json.choices[0].finish_reason, 'length');
      assert.equal(r.json.usage.completion_tokens, 10);
      const other = eos + 7;
      r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 10, temperature: 0, logit_bias: force(other), stop_token_ids: [other] });
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.equal(r.json.choices[0].stop_reason, other);
      assert.equal(r.json.usage.completion_tokens, 1);
    });

    test('default max_tokens of a completion is 16', async () => {
      const r = await client.completions.create({ model, prompt: 'Hello', temperature: 0 });
      assert.equal(r.usage.completion_tokens, 16);
    });

    test('streamed completion concatenates to the full text, ends with [DONE] and usage', async () => {
      const prompt = 'The little dog';
      const full = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0 });
      const raw = await post(d.base, '/v1/completions', {
        model, prompt, max_tokens: 20, temperature: 0, stream: true,
        stream_options: { include_usage: true },
      });
      assert.equal(raw.status, 200);
      assert.match(raw.headers.get('content-type'), /text\/event-stream/);
      const ev = sseEvents(raw.text);
      assert.equal(ev.at(-1), '[DONE]');
      const usage = ev.at(-2);
      assert.deepEqual(usage.choices, []);
      assert.equal(usage.usage.completion_tokens, 20);
      const text = ev.slice(0, -2).map((e) => e.choices[0].text).join('');
      assert.equal(text, full.choices[0].text);
      assert.equal(ev.at(-3).choices[0].finish_reason, 'length');
      // and the same through the SDK's stream reader
      const s = await client.completions.create({ model, prompt, max_tokens: 20, temperature: 0, stream: true });
      let t = '';
      for await (const c of s) t += c.choices[0]?.text ?? '';
      assert.equal(t, full.choices[0].text);
    });

    test('chat: one user message continues like the plain prompt; stream starts with the role', async () => {
      const messages = [{ role: 'user', content: 'Once upon a time' }];
      const r = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
      assert.equal(r.object, 'chat.completion');
      assert.equal(r.choices[0].message.role, 'assistant');
      assert.equal(r.choices[0].message.content, offline(model, 'Once upon a time', 12));
      const s = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0, stream: true });
      const chunks = [];
      for await (const c of s) chunks.push(c);
      assert.equal(chunks[0].object, 'chat.completion.chunk');
      assert.equal(chunks[0].choices[0].delta.role, 'assistant');
      const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
      assert.equal(text, r.choices[0].message.content);
      assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
    });

    test('chat without max_tokens uses the rest of the context', async () => {
      const r = await post(d.base, '/v1/chat/completions', {
        model, messages: [{ role: 'user', content: 'Hi' }], temperature: 0, ignore_eos: true,
      });
      assert.equal(r.status, 200);
      const maxLen = (await (await fetch(`${d.base}/v1/models`)).json()).data[0].max_model_len;
      assert.equal(r.json.usage.prompt_tokens + r.json.usage.completion_tokens, maxLen);
    });

    test('same seed, same sampled text; n choices; list of prompts', async () => {
      const a = await client.completions.create({ model, prompt: 'Once', max_tokens: 16, temperature: 1, seed: 7 });
      const b = await client.completions.create({ model, prompt: 'Once', max_tokens: 16, temperature: 1, seed: 7 });
      assert.equal(a.choices[0].text, b.choices[0].text);
      const n = await client.completions.create({ model, prompt: ['Once', 'The'], max_tokens: 4, n: 2, temperature: 0 });
      assert.deepEqual(n.choices.map((c) => c.index), [0, 1, 2, 3]);
      assert.equal(n.choices[0].text, n.choices[1].text); // greedy: both choices equal
    });

    test('token-id prompts and /tokenize + /detokenize agree', async () => {
      const tk = await post(d.base, '/tokenize', { model, prompt: 'Once upon a time' });
      assert.equal(tk.status, 200);
      assert.equal(tk.json.count, tk.json.tokens.length);
      const dt = await post(d.base, '/detokenize', { model, tokens: tk.json.tokens });
      assert.equal(dt.json.prompt, 'Once upon a time');
      const byText = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
      const byIds = await client.completions.create({ model, prompt: tk.json.tokens, max_tokens: 8, temperature: 0 });
      assert.equal(byIds.choices[0].text, byText.choices[0].text);
    });

    test('stop strings end the text before the stop string', async () => {
      const full = (await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0 })).choices[0].text;
      const stop = full.slice(5, 7);
      const cut = full.slice(0, full.indexOf(stop));
      const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [stop] });
      assert.equal(r.choices[0].text, cut);
      assert.equal(r.choices[0].finish_reason, 'stop');
      const s = await post(d.base, '/v1/completions', { model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop, stream: true });
      const text = sseEvents(s.text).slice(0, -1).map((e) => e.choices[0].text).join('');
      assert.equal(text, cut);
    });

    test('logprobs: tokens concatenate to the text, with alternatives', async () => {
      const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10, temperature: 0, logprobs: 3 });
      const lp = r.choices[0].logprobs;
      assert.equal(lp.tokens.join(''), r.choices[0].text);
      assert.equal(lp.token_logprobs.length, lp.tokens.length);
      for (const x of lp.token_logprobs) assert.ok(x <= 0);
      for (const t of lp.top_logprobs) assert.ok(Object.keys(t).length >= 1 && Object.keys(t).length <= 3);
      const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Once' }], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 });
      const content = c.choices[0].logprobs.content;
      assert.equal(content.map((x) => x.token).join(''), c.choices[0].message.content);
      for (const x of content) assert.equal(x.top_logprobs.length, 2);
    });

    test('echo prepends the prompt', async () => {
      const r = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0, echo: true });
      assert.ok(r.choices[0].text.startsWith('Once upon'));
    });

    test('bad requests get OpenAI error objects and the SDK error classes', async () => {
      await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: -1 }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400);
      await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x' }),
        (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
      await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 10 ** 6 }),
        (e) => e instanceof OpenAI.BadRequestError && /maximum context length/.test(e.message));
      const bad = await post(d.base, '/v1/completions', '{"prompt": ');
      assert.equal(bad.status, 400);
      assert.equal(bad.json.error.type, 'invalid_request_error');
      assert.ok(typeof bad.json.error.message === 'string' && bad.json.error.message.length > 0);
      const missing = await post(d.base, '/v1/chat/completions', { model });
      assert.equal(missing.status, 400);
      assert.equal(missing.json.error.param, 'messages');
      const route = await post(d.base, '/v1/nothing', {});
      assert.equal(route.status, 404);
      const method = await fetch(`${d.base}/v1/completions`);
      assert.equal(method.status, 405);
      assert.ok((await method.json()).error);
      const big = await post(d.base, '/v1/completions', JSON.stringify({ model, prompt: 'a'.repeat(9 << 20) }));
      assert.equal(big.status, 413);
      // and then a good request still works
      const ok = await client.completions.create({ model, prompt: 'Once', max_tokens: 2 });
      assert.equal(ok.choices.length, 1);
    });

    test('health, version and metrics', async () => {
      assert.equal((await fetch(`${d.base}/health`)).status, 200);
      const v = await (await fetch(`${d.base}/version`)).json();
      assert.match(v.version, /^\d+\.\d+\.\d+$/);
      const m = await (await fetch(`${d.base}/metrics`)).text();
      for (const name of ['inferd:num_requests_running', 'inferd:num_requests_waiting',
        'inferd:kv_cache_usage_perc', 'inferd:prompt_tokens_total', 'inferd:generation_tokens_total',
        'inferd:request_success_total', 'inferd:time_to_first_token_seconds_bucket',
        'inferd:inter_token_latency_seconds_bucket', 'inferd:e2e_request_latency_seconds_bucket']) {
        assert.ok(m.includes(name), `metrics lack ${name}`);
      }
    });

    test('concurrent greedy requests equal the same requests run alone', async () => {
      const prompts = Array.from({ length: 16 }, (_, i) => `Once upon a time ${'there was '.repeat(i % 5)}a`);
      const alone = [];
      for (const [i, p] of prompts.entries()) {
        alone.push((await client.completions.create({ model, prompt: p, max_tokens: 12 + (i % 7), temperature: 0 })).choices[0].text);
      }
      const together = await Promise.all(prompts.map((p, i) =>
        client.completions.create({ model, prompt: p, max_tokens: 12 + (i % 7), temperature: 0 })));
      assert.deepEqual(together.map((r) => r.choices[0].text), alone);
    });

    test('a client that disconnects mid-stream cancels its request; the server keeps serving', async () => {
      // the tiny model can finish a whole request before the disconnect is
      // seen, so it tries a few times: at least one must end as "abort"
      const aborted = async () => {
        const m = await (await fetch(`${d.base}/metrics`)).text();
        const hit = /inferd:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)/.exec(m);
        return hit ? Number(hit[1]) : 0;
      };
      const before = await aborted();
      for (let attempt = 0; attempt < 5 && (await aborted()) === before; attempt++) {
        const ac = new AbortController();
        const r = await fetch(`${d.base}/v1/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
          body: JSON.stringify({ model, prompt: 'Once', max_tokens: 240, n: 8, temperature: 0, stream: true,
                                 ignore_eos: true }),
        });
        const reader = r.body.getReader();
        await reader.read();
        ac.abort();
        const ok = await client.completions.create({ model, prompt: 'Once', max_tokens: 3 });
        assert.equal(ok.choices.length, 1);
        // the request's blocks come back: KV usage returns to idle
        let usage = 1;
        for (let i = 0; i < 100 && usage > 0; i++) {
          const m = await (await fetch(`${d.base}/metrics`)).text();
          usage = Number(/^inferd:kv_cache_usage_perc\{[^}]*\} (\S+)$/m.exec(m)[1]);
          if (usage > 0) await new Promise((res) => setTimeout(res, 50));
        }
        assert.equal(usage, 0);
      }
      assert.ok((await aborted()) > before, 'no request was cancelled by its client leaving');
    });
  });
}

describe('authentication', () => {
  let d;
  before(async () => { d = await startDaemon(models[0], ['--api-key', 'sekret']); });
  after(async () => { await d.stop(); });

  test('a wrong or missing key is 401; /health and /metrics stay open', async () => {
    const bad = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    const none = await fetch(`${d.base}/v1/models`);
    assert.equal(none.status, 401);
    assert.equal((await none.json()).error.type, 'authentication_error');
    assert.equal((await fetch(`${d.base}/health`)).status, 200);
    assert.equal((await fetch(`${d.base}/metrics`)).status, 200);
    const good = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'sekret', maxRetries: 0 });
    const r = await good.completions.create({ model: models[0], prompt: 'Once', max_tokens: 2 });
    assert.equal(r.choices.length, 1);
  });
});
