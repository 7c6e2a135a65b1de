// Continuous batching through the API: many concurrent streams of mixed
// lengths (some cancelled), a KV pool small enough to force preemption, and
// prefix-cache hits: every finished greedy output equals the same request run
// alone, and the metrics show what happened.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { startDaemon, post, sseEvents, offline, INFERD } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const real = '../shared/models/stories260K';
const model = fs.existsSync(real) ? real : `${FIXTURES}/tiny`;
if (model !== real) console.log(`# ${real} not present: batching tests run on ${model}`);

const words = ['Once upon a time', 'The little dog', 'Lily and Ben', 'One day', 'A big red ball', 'The sun'];
function workload(n) {
  return Array.from({ length: n }, (_, i) => ({
    prompt: `${words[i % words.length]}${' and then'.repeat(i % 4)}`,
    max_tokens: 8 + ((i * 37) % 90),
    cancel: i % 5 === 3, // a share of them go away mid-stream
  }));
}

// A KV budget in KiB as the CPU needs it for a given number of blocks:
// --device cuda keeps the cache in bf16, half the CPU's f32, so the same
// blocks take half the memory there (scripts/gpu-check sets the device).
const kvKiB = (cpuKiB) => `${process.env.INFERD_E2E_DEVICE === 'cuda' ? cpuKiB / 2 : cpuKiB}KiB`;

function metric(text, name, label = '') {
  const re = new RegExp(`^inferd:${name}\\{[^}]*${label}[^}]*\\} (\\S+)$`, 'm');
  const m = re.exec(text);
  return m ? Number(m[1]) : NaN;
}

async function alone(base, w) {
  const r = await post(base, '/v1/completions', { prompt: w.prompt, max_tokens: w.max_tokens, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  return r.json.choices[0].text;
}

// Streams w; cancels after the first text chunk when w.cancel; returns the text.
async function stream(base, w) {
  const ac = new AbortController();
  const r = await fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify({ prompt: w.prompt, max_tokens: w.max_tokens, temperature: 0, stream: true }),
  });
  const reader = r.body.getReader();
  let raw = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      raw += Buffer.from(value).toString();
      if (w.cancel && raw.includes('"text"')) { ac.abort(); return null; }
    }
  } catch (e) {
    if (w.cancel) return null;
    throw e;
  }
  const ev = sseEvents(raw);
  assert.equal(ev.at(-1), '[DONE]');
  return ev.slice(0, -1).map((e) => e.choices[0].text).join('');
}

async function waitIdle(base) {
  for (let i = 0; i < 400; i++) {
    const m = await (await fetch(`${base}/metrics`)).text();
    if (metric(m, 'num_requests_running') === 0 && metric(m, 'num_requests_waiting') === 0 &&
        metric(m, 'kv_cache_usage_perc') === 0) return m;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail('not idle');
}

// Runs every request of work at once through send (none cancelled) and
// asserts the texts equal expected and that the pool had to preempt.
async function allAtOnceWithPreemption(base, work, expected, send) {
  const got = await Promise.all(work.map((w) => send(base, { ...w, cancel: false })));
  assert.deepEqual(got, expected);
  const m = await waitIdle(base);
  assert.ok(metric(m, 'num_preemptions_total') > 0, 'no preemption happened');
}

describe(`continuous batching on ${model}`, () => {
  const work = workload(64);
  let expected;

  before(async () => {
    const d = await startDaemon(model, ['--no-enable-prefix-caching']);
    expected = [];
    for (const w of work) expected.push(await alone(d.base, w));
    await d.stop();
  });

  test('64 staggered concurrent streams, a share cancelled: finished outputs equal the alone ones', async () => {
    const d = await startDaemon(model, ['--max-num-seqs', '32']);
    try {
      // staggered: each arrives 4 ms after the one before, joining running batches
      const got = await Promise.all(work.map((w, i) =>
        new Promise((res) => setTimeout(res, 4 * i)).then(() => stream(d.base, w))));
      got.forEach((g, i) => { if (g !== null) assert.equal(g, expected[i], `request ${i}`); });
      assert.ok(got.filter((g) => g !== null).length >= 50);
      const m = await waitIdle(d.base);
      assert.ok(metric(m, 'request_success_total', 'finished_reason="abort"') >= 1);
    } finally { await d.stop(); }
  });

  test('a tiny KV pool forces preemption; outputs are still identical', async () => {
    // room for about 6 full sequences at once: 64 requests must take turns
    const d = await startDaemon(model, ['--kv-cache-memory', kvKiB(model === real ? 800 : 1024),
      '--max-num-seqs', '64', '--no-enable-prefix-caching']);
    try {
      await allAtOnceWithPreemption(d.base, work, expected, alone);
    } finally { await d.stop(); }
  });

  test('a request that can never fit the KV pool is refused with 400', async () => {
    const d = await startDaemon(model, ['--kv-cache-memory', '64KiB']);
    try {
      const r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 400, temperature: 0 });
      assert.equal(r.status, 400);
      assert.match(r.json.error.message, /KV cache/);
    } finally { await d.stop(); }
  });

  test('prefix-cache hits give identical outputs and show in usage and metrics', async () => {
    const d = await startDaemon(model);
    try {
      const system = `${'Once upon a time there was a little girl named Lily. '.repeat(4)}`;
      const req = (q) => ({ prompt: system + q, max_tokens: 24, temperature: 0 });
      const first = await post(d.base, '/v1/completions', req('She'));
      const second = await post(d.base, '/v1/completions', req('She'));
      const third = await post(d.base, '/v1/completions', req('He'));
      assert.equal(first.json.usage.prompt_tokens_details.cached_tokens, 0);
      assert.ok(second.json.usage.prompt_tokens_details.cached_tokens >= 16);
      assert.ok(third.json.usage.prompt_tokens_details.cached_tokens >= 16);
      assert.equal(second.json.choices[0].text, first.json.choices[0].text);
      // and equal to a server that caches nothing
      const nd = await startDaemon(model, ['--no-enable-prefix-caching']);
      try {
        const cold = await post(nd.base, '/v1/completions', req('He'));
        assert.equal(third.json.choices[0].text, cold.json.choices[0].text);
        assert.equal(cold.json.usage.prompt_tokens_details.cached_tokens, 0);
      } finally { await nd.stop(); }
      // a different cache_salt shares nothing
      const salted = await post(d.base, '/v1/completions', { ...req('She'), cache_salt: 'tenant-b' });
      assert.equal(salted.json.usage.prompt_tokens_details.cached_tokens, 0);
      assert.equal(salted.json.choices[0].text, first.json.choices[0].text);
      const m = await waitIdle(d.base);
      assert.ok(metric(m, 'prefix_cache_hits_total') >= 32);
      assert.ok(metric(m, 'prefix_cache_queries_total') > metric(m, 'prefix_cache_hits_total'));
    } finally { await d.stop(); }
  });
});

// scripts/gpu-check runs this suite with every daemon on --device cuda,
// where the same int8 arithmetic runs in cuda/k_quant.cu.
describe(`int8 weights (--quantization int8) on ${model}`, () => {
  const work = workload(32);
  let expected;

  before(async () => {
    const d = await startDaemon(model, ['--quantization', 'int8', '--no-enable-prefix-caching']);
    try {
      expected = [];
      for (const w of work) expected.push(await alone(d.base, w));
    } finally { await d.stop(); }
  });

  test('concurrent streams and preemption give the outputs each request gets alone', async () => {
    const d = await startDaemon(model, ['--quantization', 'int8', '--max-num-seqs', '32',
      '--kv-cache-memory', kvKiB(model === real ? 800 : 256), '--no-enable-prefix-caching']);
    try {
      await allAtOnceWithPreemption(d.base, work, expected, stream);
    } finally { await d.stop(); }
  });

  test('speculation on an int8 target (the draft stays as stored) gives the same greedy text', async () => {
    // the draft model where ../shared has one, else n-gram prompt lookup
    const draft = '../shared/models/llama2xs-260K';
    const spec = model === real && fs.existsSync(draft)
      ? ['--speculative-config', `{"model":"${draft}","num_speculative_tokens":4}`, '--max-model-len', '256']
      : ['--speculative-config', '{"method":"ngram","num_speculative_tokens":4}'];
    const d = await startDaemon(model, ['--quantization', 'int8', '--no-enable-prefix-caching', ...spec]);
    try {
      for (const [i, w] of work.slice(0, 8).entries()) assert.equal(await alone(d.base, w), expected[i], `request ${i}`);
      const m = await waitIdle(d.base);
      assert.ok(metric(m, 'spec_decode_num_drafts_total') > 0, 'nothing was drafted');
    } finally { await d.stop(); }
  });

  test('the API and `inferd generate --quantization int8` give the same greedy text', () => {
    assert.equal(offline(model, work[0].prompt, work[0].max_tokens, ['--quantization', 'int8']),
      expected[0]);
  });
});

// A GPTQ checkpoint under --quantization int4 runs its own codes, scales and
// zeros on the CPU (engine/hfq_gptq.c, cpu/q4.h), a desc_act one with each
// token's activations gathered into each linear's order of inputs, and a
// GGUF Q4_0 file its blocks' codes and scales (engine/gguf_model.c, the
// tokenizer given beside it: the test file has none); the server must load
// them so, as `inferd generate` does (tests/ref/check_hfq.py and
// check_gguf.py check the numbers).
describe('4-bit codes as stored with --quantization int4 on the CPU', () => {
  const int4 = ['--quantization', 'int4', '--device', 'cpu'];
  for (const [fixture, how, extra] of [
    ['tiny-gptq', /gptq 4-bit \(codes, scales and zeros as stored; activations int8 per token\)/, []],
    ['tiny-gptq-desc', /gptq 4-bit \(codes, scales and zeros as stored, inputs sorted by group;/, []],
    ['tiny-q4_0.gguf', /GGUF Q4_0 \(14 layer matrices' codes run as stored by the int4 kernels/,
      ['--tokenizer', `${FIXTURES}/tiny`]]]) {
    test(`serve runs ${fixture}'s codes as stored and answers as generate does, alone and at once`,
      async () => {
        const path = `${FIXTURES}/${fixture}`;
        const args = [...int4, ...extra];
        const work = workload(8).map((w) => ({ ...w, cancel: false }));
        const d = await startDaemon(path, [...args, '--max-num-seqs', '8', '--no-enable-prefix-caching']);
        try {
          assert.match(d.log(), how);
          const single = [];
          for (const w of work) single.push(await alone(d.base, w));
          const together = await Promise.all(work.map((w) => alone(d.base, w)));
          assert.deepEqual(together, single);
          assert.equal(single[0], offline(path, work[0].prompt, work[0].max_tokens, args));
        } finally { await d.stop(); }
      });
  }
});

describe('--quantization usage errors', () => {
  test('an unknown scheme, or int8 over several GPUs, is a usage error', () => {
    for (const extra of [['--quantization', 'fp4'],
      ['--quantization', 'int8', '--device', 'cuda', '--tensor-parallel-size', '2']]) {
      const r = spawnSync(INFERD, ['--model', model, '--port', '0', ...extra]);
      assert.equal(r.status, 2, r.stderr.toString());
      assert.match(r.stderr.toString(), /--quantization/);
    }
  });
});
