// The MLP speculator served: a random speculator in vLLM's mlp_speculator
// format (made by tests/ref/mlp_spec_ref.py for the model's vocabulary and
// hidden size) is recognised from --speculative-config '{"model": DIR}',
// drafts from the target's hidden states, and greedy outputs equal
// speculation off, alone and 16 concurrent. A speculator whose vocabulary
// differs from the target's, or num_speculative_tokens above its n_predict,
// is refused at start with a message.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startDaemon, post, INFERD } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const real = '../shared/models/stories260K';
const model = fs.existsSync(real) ? real : `${FIXTURES}/tiny`;
const PYTHON = process.env.PYTHON || '/usr/bin/python3';

function metric(text, name) {
  const m = new RegExp(`^inferd:${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

function makeSpeculator(dir, vocab, hidden, extra = []) {
  const r = spawnSync(PYTHON, ['tests/ref/mlp_spec_ref.py', 'make', dir, '--vocab', String(vocab),
    '--emb-dim', String(hidden), '--inner-dim', '32', '--n-predict', '3', '--tie', '--scale-input',
    ...extra], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
}

describe('MLP speculator', () => {
  const cfg = JSON.parse(fs.readFileSync(`${model}/config.json`, 'utf8'));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'inferd-mlp-'));
  const good = path.join(tmp, 'good'), bad = path.join(tmp, 'bad');
  const reqs = ['Once upon a time', 'The cat sat on the mat.', 'Lily and Ben went to the park.',
    'one two three'].map((p, i) => ({ prompt: p, max_tokens: 40 + 9 * i, temperature: 0, ignore_eos: true }));
  let want;

  before(async () => {
    makeSpeculator(good, cfg.vocab_size, cfg.hidden_size);
    makeSpeculator(bad, cfg.vocab_size + 1, cfg.hidden_size);
    const d = await startDaemon(model, []);
    want = [];
    try {
      for (const r of reqs) want.push((await post(d.base, '/v1/completions', r)).json.choices[0].text);
    } finally { await d.stop(); }
  });
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));

  test('greedy outputs equal speculation off, alone and 16 concurrent; it drafts', async () => {
    const d = await startDaemon(model, ['--speculative-config',
      JSON.stringify({ model: good, num_speculative_tokens: 3, min_acceptance: 0 })]);
    try {
      assert.match(d.log(), /speculative decoding/);
      // scripts/gpu-check runs this on --device cuda: the stages on the GPU
      if (process.env.INFERD_E2E_DEVICE === 'cuda') assert.match(d.log(), /its stages on the GPU/);
      else assert.doesNotMatch(d.log(), /its stages on the GPU/);
      for (const [i, r] of reqs.entries()) {
        const got = await post(d.base, '/v1/completions', r);
        assert.equal(got.status, 200, got.text);
        assert.equal(got.json.choices[0].text, want[i], `prompt ${i} alone`);
      }
      const many = Array.from({ length: 16 }, (_, i) => reqs[i % reqs.length]);
      const got = await Promise.all(many.map((r) => post(d.base, '/v1/completions', r)));
      got.forEach((g, i) => assert.equal(g.json.choices[0].text, want[i % reqs.length], `request ${i} of 16`));
      const m = await (await fetch(`${d.base}/metrics`)).text();
      assert.ok(metric(m, 'spec_decode_num_draft_tokens_total') > 0, 'nothing was drafted');
    } finally { await d.stop(); }
  });

  test('a mismatched vocabulary and too many tokens are refused at start', () => {
    let r = spawnSync(INFERD, ['--model', model, '--speculative-config', JSON.stringify({ model: bad })],
      { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, new RegExp(`vocabulary has ${cfg.vocab_size + 1} tokens, the target's ${cfg.vocab_size}`));
    r = spawnSync(INFERD, ['--model', model, '--speculative-config',
      JSON.stringify({ method: 'mlp_speculator', model: good, num_speculative_tokens: 4 })], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /num_speculative_tokens 4 is more than the speculator's n_predict 3/);
  });
});
