// Prompt logprobs end to end: vLLM's prompt_logprobs and OpenAI's echo with
// logprobs on /v1/completions, checked against log-softmax of the numpy
// Llama reference's logits (tests/ref/llama_ref.py, written from the
// published equations), in one chunk and in many (a small
// --max-num-batched-tokens and a prompt longer than the engine's
// prompt-logprob rows per step), and with the prefix cache warm.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { startDaemon, post, sseEvents } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const PY = process.env.PYTHON || '/usr/bin/python3';
const model = `${FIXTURES}/tiny`;
const TOP = 3;

// 70 prompt ids (BOS first): more than ENG_PROMPT_LOGPROB_ROWS (32), so even
// the unchunked server splits the prompt.
const ids = [1];
for (let i = 0, x = 7; i < 69; i++) { x = (x * 1103515245 + 12345) % 2147483648; ids.push(3 + (x % 380)); }

// The tolerance of each position: 1e-3 for the CPU's float32 forward against
// the float64 reference, through log-softmax. scripts/gpu-check runs this
// suite on --device cuda, whose weights and activations are bf16
// (docs/cuda.md): there a logit may be off by what test_cuda allows against
// the CPU backend, 3% of the row's range + 1e-3, and a logprob by twice that
// (the logit and the log-sum-exp). The plumbing (which row, which position)
// is what the CPU run checks to 1e-3.
const onCuda = process.env.INFERD_E2E_DEVICE === 'cuda';

// The reference: per position p >= 1, log-softmax of the logits at p - 1,
// the prompt token's logprob and rank and the top TOP ids, and the tolerance.
function reference() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'plp-'));
  const npy = path.join(dir, 'logits.npy');
  execFileSync(PY, ['tests/ref/llama_ref.py', '--model', model, '--tokens', ids.join(','),
    '--logits', npy]);
  const code = `
import json, sys, numpy as np
lg = np.load(sys.argv[1]).astype(np.float64)
ids = [int(t) for t in sys.argv[2].split(',')]
out = []
for p in range(1, len(ids)):
    row = lg[p - 1]
    ls = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
    t = ids[p]
    tol = 2 * (0.03 * float(row.max() - row.min()) + 1e-3) if ${onCuda ? 1 : 0} else 1e-3
    top = [int(i) for i in np.argsort(-ls, kind='stable')[:${TOP + 1}]]
    out.append({'id': t, 'lp': float(ls[t]), 'rank': int((row > row[t]).sum()) + 1,
                'rank_lo': int((row > row[t] + tol).sum()) + 1,
                'rank_hi': int((row > row[t] - tol).sum()) + 1,
                'tol': tol, 'top': [[i, float(ls[i])] for i in top]})
print(json.dumps(out))`;
  const r = JSON.parse(execFileSync(PY, ['-c', code, npy, ids.join(',')], { encoding: 'utf8' }));
  fs.rmSync(dir, { recursive: true, force: true });
  return r;
}


function checkPlp(plp, ref) {
  assert.equal(plp.length, ids.length);
  assert.equal(plp[0], null);
  for (let p = 1; p < ids.length; p++) {
    const got = plp[p], want = ref[p - 1];
    const mine = got[String(want.id)];
    assert.ok(mine, `position ${p}: the prompt token ${want.id} is missing`);
    const TOL = want.tol;
    assert.ok(Math.abs(mine.logprob - want.lp) < TOL,
      `position ${p}: logprob ${mine.logprob} vs reference ${want.lp}`);
    if (onCuda) // a near-tie may order either way in bf16
      assert.ok(mine.rank >= want.rank_lo && mine.rank <= want.rank_hi, `position ${p}: rank`);
    else
      assert.equal(mine.rank, want.rank, `position ${p}: rank`);
    assert.equal(typeof mine.decoded_token, 'string');
    for (let j = 0; j < TOP; j++) { // the top ids, unless a near-tie reorders them
      const [tid, tlp] = want.top[j];
      const e = got[String(tid)];
      const near = (i) => i >= 0 && i <= TOP && Math.abs(want.top[i][1] - tlp) < TOL;
      if ((j + 1 < TOP || onCuda) && near(j + 1)) continue;
      if (onCuda && near(j - 1)) continue;
      assert.ok(e, `position ${p}: top ${j + 1} id ${tid} missing`);
      assert.ok(Math.abs(e.logprob - tlp) < TOL);
      if (tid !== want.id) assert.equal(e.rank, j + 1);
    }
    assert.ok(Object.keys(got).length <= TOP + 1);
  }
}

const body = { model, prompt: ids, max_tokens: 2, temperature: 0 };

describe('prompt logprobs', () => {
  let ref, big, small;
  before(async () => {
    ref = reference();
    big = await startDaemon(model);
    small = await startDaemon(model, ['--max-num-batched-tokens', '5']);
  });
  after(async () => { await big.stop(); await small.stop(); });

  test('prompt_logprobs match the numpy reference, chunked and not', async () => {
    const res = [];
    for (const d of [big, small]) {
      const r = await post(d.base, '/v1/completions', { ...body, prompt_logprobs: TOP });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      checkPlp(r.json.choices[0].prompt_logprobs, ref);
      res.push(r.json.choices[0]);
    }
    // chunking changes the batches, not the numbers
    assert.deepEqual(res[0].prompt_logprobs, res[1].prompt_logprobs);
    assert.equal(res[0].text, res[1].text);
  });

  test('a warm prefix cache does not skip prompt rows', async () => {
    const plain = await post(big.base, '/v1/completions', body); // fills the cache
    assert.equal(plain.status, 200);
    assert.equal(plain.json.choices[0].prompt_logprobs, undefined);
    const r = await post(big.base, '/v1/completions', { ...body, prompt_logprobs: 0 });
    assert.equal(r.status, 200);
    const plp = r.json.choices[0].prompt_logprobs;
    assert.equal(plp.length, ids.length);
    for (let p = 1; p < ids.length; p++) {
      const keys = Object.keys(plp[p]);
      assert.deepEqual(keys, [String(ids[p])]);
      assert.ok(Math.abs(plp[p][keys[0]].logprob - ref[p - 1].lp) < ref[p - 1].tol);
    }
  });

  test('echo with logprobs through the openai SDK', async () => {
    const client = new OpenAI({ baseURL: `${big.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    const r = await client.completions.create({ ...body, echo: true, logprobs: 2 });
    const lp = r.choices[0].logprobs;
    const n = ids.length + 2;
    assert.equal(lp.tokens.length, n);
    assert.equal(lp.token_logprobs.length, n);
    assert.equal(lp.top_logprobs.length, n);
    assert.equal(lp.text_offset.length, n);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    for (let p = 1; p < ids.length; p++) {
      assert.ok(Math.abs(lp.token_logprobs[p] - ref[p - 1].lp) < ref[p - 1].tol, `position ${p}`);
      assert.ok(Object.keys(lp.top_logprobs[p]).length >= 1);
    }
    for (let i = ids.length; i < n; i++) assert.ok(lp.token_logprobs[i] <= 0);
    for (let i = 1; i < n; i++) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    // the output tokens' records are what logprobs without echo gives
    const plain = await client.completions.create({ ...body, logprobs: 2 });
    assert.deepEqual(lp.token_logprobs.slice(ids.length), plain.choices[0].logprobs.token_logprobs);
    assert.ok(r.choices[0].text.endsWith(plain.choices[0].text));
  });

  test('streamed prompt_logprobs come once, in the first chunk, equal to the response', async () => {
    const whole = await post(big.base, '/v1/completions', { ...body, prompt_logprobs: TOP });
    assert.equal(whole.status, 200);
    const r = await post(big.base, '/v1/completions', { ...body, prompt_logprobs: TOP, stream: true });
    assert.equal(r.status, 200, r.text);
    const ev = sseEvents(r.text);
    assert.equal(ev.at(-1), '[DONE]');
    const chunks = ev.slice(0, -1);
    const withPlp = chunks.filter((c) => c.choices[0]?.prompt_logprobs !== undefined);
    assert.equal(withPlp.length, 1);
    assert.equal(withPlp[0], chunks[0]); // the first chunk: prompt logprobs and the first token
    assert.ok(chunks[0].choices[0].text.length > 0 || chunks.length === 1);
    checkPlp(chunks[0].choices[0].prompt_logprobs, ref);
    assert.deepEqual(chunks[0].choices[0].prompt_logprobs, whole.json.choices[0].prompt_logprobs);
    assert.equal(chunks.map((c) => c.choices[0].text).join(''), whole.json.choices[0].text);
  });

  test('streamed echo with logprobs (openai SDK): the prompt leads the first chunk', async () => {
    const client = new OpenAI({ baseURL: `${small.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    const whole = await client.completions.create({ ...body, echo: true, logprobs: 2 });
    const stream = await client.completions.create({ ...body, echo: true, logprobs: 2, stream: true });
    let text = '', tokens = [], lps = [], offs = [], tops = [], n = 0;
    for await (const c of stream) {
      const ch = c.choices[0];
      if (!ch) continue;
      if (n++ === 0) assert.equal(ch.logprobs.token_logprobs[0], null); // the prompt's first token
      text += ch.text;
      tokens.push(...ch.logprobs.tokens);
      lps.push(...ch.logprobs.token_logprobs);
      offs.push(...ch.logprobs.text_offset);
      tops.push(...ch.logprobs.top_logprobs);
    }
    const w = whole.choices[0];
    assert.equal(text, w.text);
    assert.deepEqual(tokens, w.logprobs.tokens);
    assert.deepEqual(lps, w.logprobs.token_logprobs);
    assert.deepEqual(offs, w.logprobs.text_offset);
    assert.deepEqual(tops, w.logprobs.top_logprobs);
    assert.equal(lps.length, ids.length + 2);
    for (let p = 1; p < ids.length; p++) assert.ok(Math.abs(lps[p] - ref[p - 1].lp) < ref[p - 1].tol);
  });

  test('streamed chat prompt_logprobs: top level of the first chunk after the role', async () => {
    const req = { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3,
      temperature: 0, prompt_logprobs: 2 };
    const whole = await post(big.base, '/v1/chat/completions', req);
    assert.equal(whole.status, 200);
    const r = await post(big.base, '/v1/chat/completions', { ...req, stream: true });
    assert.equal(r.status, 200, r.text);
    const chunks = sseEvents(r.text).slice(0, -1);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    assert.equal(chunks[0].prompt_logprobs, undefined);
    const withPlp = chunks.filter((c) => c.prompt_logprobs !== undefined);
    assert.equal(withPlp.length, 1);
    assert.equal(withPlp[0], chunks[1]);
    assert.deepEqual(withPlp[0].prompt_logprobs, whole.json.prompt_logprobs);
    assert.equal(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join(''),
      whole.json.choices[0].message.content);
  });

  test('prompt_logprobs -1 (the whole vocabulary) and above max_logprobs are 400s, as vLLM', async () => {
    for (const v of [-1, 21]) {
      for (const stream of [false, true]) {
        const r = await post(big.base, '/v1/completions', { ...body, prompt_logprobs: v, stream });
        assert.equal(r.status, 400, `prompt_logprobs ${v}`);
        assert.equal(r.json.error.type, 'invalid_request_error');
        assert.equal(r.json.error.param, 'prompt_logprobs');
      }
    }
    const r = await post(big.base, '/v1/completions', { ...body, prompt_logprobs: -1 });
    assert.match(r.json.error.message, /Requested prompt logprobs of \d+ .*greater than max allowed: 20/);
    // with --max-logprobs at least the vocabulary, -1 is every token's logprob
  });

  test('chat has prompt_logprobs at the top level', async () => {
    const r = await post(big.base, '/v1/chat/completions', {
      model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1, prompt_logprobs: 1 });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const plp = r.json.prompt_logprobs;
    assert.ok(Array.isArray(plp) && plp.length === r.json.usage.prompt_tokens);
    assert.equal(plp[0], null);
    for (const e of plp.slice(1)) {
      const v = Object.values(e);
      assert.ok(v.length >= 1 && v.length <= 2 && v.every((x) => x.logprob <= 0 && x.rank >= 1));
    }
  });
});
