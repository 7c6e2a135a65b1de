// Speculative decoding end to end: with the n-gram proposer and with
// llama2xs-260K drafting for stories260K, greedy outputs equal speculation
// off, alone and under 32 concurrent requests, with stop strings and
// max_tokens cutting inside accepted runs; the metrics count drafts.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startDaemon, post, sseEvents } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const target = '../shared/models/stories260K';
const draft = '../shared/models/llama2xs-260K';
const haveReal = fs.existsSync(target) && fs.existsSync(draft);
if (!haveReal) console.log('# skipped: ../shared/models (draft-model tests); n-gram tests run on the own fixture');
const model = haveReal ? target : `${FIXTURES}/tiny`;

// Repetitive prompts give the n-gram proposer something to find.
const prompts = [
  'Once upon a time',
  'The cat sat on the mat. The cat sat on the mat. The cat',
  'Lily and Ben went to the park. Lily and Ben',
  'one two three one two three one two',
  'The sun was shining. The birds were singing. The sun',
  'Tom had a red ball. Tom had a blue ball. Tom had a',
  'Once upon a time there was a dog. Once upon a time there was a',
  'She said, "I want to play." He said, "I want to',
];

const configs = [['ngram', ['--speculative-config', '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":1}']]];
if (haveReal) {
  configs.push(['draft model', ['--speculative-config', `{"model":"${draft}","num_speculative_tokens":4}`, '--max-model-len', '256']]);
  configs.push(['draft model, older flags', ['--speculative-model', draft, '--num-speculative-tokens', '3', '--max-model-len', '256']]);
}

function metric(text, name) {
  const m = new RegExp(`^inferd:${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

describe('speculative decoding', () => {
  let want; // speculation off: the reference
  const maxLen = haveReal ? ['--max-model-len', '256'] : [];
  const reqs = prompts.map((p, i) => ({ prompt: p, max_tokens: 60 + 17 * i, temperature: 0, ignore_eos: true }));

  before(async () => {
    const d = await startDaemon(model, maxLen);
    want = [];
    for (const r of reqs) want.push((await post(d.base, '/v1/completions', r)).json.choices[0].text);
    await d.stop();
  });

  for (const [name, flags] of configs) {
    test(`${name}: greedy outputs equal speculation off, alone and 32 concurrent`, async () => {
      const d = await startDaemon(model, flags);
      try {
        for (const [i, r] of reqs.entries()) {
          const got = await post(d.base, '/v1/completions', r);
          assert.equal(got.status, 200, got.text);
          assert.equal(got.json.choices[0].text, want[i], `prompt ${i} alone`);
        }
        const many = Array.from({ length: 32 }, (_, i) => reqs[i % reqs.length]);
        const got = await Promise.all(many.map((r) => post(d.base, '/v1/completions', r)));
        got.forEach((g, i) => assert.equal(g.json.choices[0].text, want[i % reqs.length], `request ${i} of 32`));
        const m = await (await fetch(`${d.base}/metrics`)).text();
        assert.ok(metric(m, 'spec_decode_num_drafts_total') > 0, 'nothing was drafted');
        assert.ok(metric(m, 'spec_decode_num_accepted_tokens_total') > 0, 'nothing was accepted');
        assert.ok(metric(m, 'spec_decode_num_draft_tokens_total') >= metric(m, 'spec_decode_num_accepted_tokens_total'));
      } finally { await d.stop(); }
    });

    test(`${name}: stop strings, max_tokens and streaming cut exactly inside accepted runs`, async () => {
      const d = await startDaemon(model, flags);
      try {
        for (const [i, r] of reqs.entries()) {
          // every max_tokens from 1 to 12: the cut lands inside accepted runs
          for (let n = 1; n <= 12; n += 1 + (i % 3)) {
            const got = await post(d.base, '/v1/completions', { ...r, max_tokens: n });
            assert.equal(got.json.usage.completion_tokens, n);
            assert.ok(want[i].startsWith(got.json.choices[0].text), `max_tokens ${n} of prompt ${i}`);
          }
          const stop = want[i].slice(20, 23);
          if (stop.length === 3 && want[i].indexOf(stop) > 0) {
            const got = await post(d.base, '/v1/completions', { ...r, stop: [stop] });
            assert.equal(got.json.choices[0].text, want[i].slice(0, want[i].indexOf(stop)));
            assert.equal(got.json.choices[0].finish_reason, 'stop');
          }
          const s = await post(d.base, '/v1/completions', { ...r, stream: true });
          const text = sseEvents(s.text).slice(0, -1).map((e) => e.choices[0].text).join('');
          assert.equal(text, want[i]);
        }
      } finally { await d.stop(); }
    });
  }

  test('a request can opt out with "speculative": false', async () => {
    const d = await startDaemon(model, configs[0][1]);
    try {
      const got = await post(d.base, '/v1/completions', { ...reqs[3], speculative: false });
      assert.equal(got.json.choices[0].text, want[3]);
      const m = await (await fetch(`${d.base}/metrics`)).text();
      assert.equal(metric(m, 'spec_decode_num_drafts_total'), 0);
    } finally { await d.stop(); }
  });

  test('never a slowdown: no drafting at disable_by_batch_size, fewer drafts under a high acceptance floor', async () => {
    const ngram = (extra) => ['--speculative-config', JSON.stringify({
      method: 'ngram', num_speculative_tokens: 4, prompt_lookup_max: 4, prompt_lookup_min: 1, ...extra })];
    const drafts = async (flags) => {
      const d = await startDaemon(model, flags);
      try {
        for (const [i, r] of reqs.entries()) {
          const got = await post(d.base, '/v1/completions', r);
          assert.equal(got.json.choices[0].text, want[i], `prompt ${i}`);
        }
        return metric(await (await fetch(`${d.base}/metrics`)).text(), 'spec_decode_num_drafts_total');
      } finally { await d.stop(); }
    };
    const free = await drafts(ngram({ min_acceptance: 0 }));
    assert.ok(free > 0, 'nothing was drafted');
    // one running request is already "a batch of 1": it never drafts
    assert.equal(await drafts(ngram({ disable_by_batch_size: 1 })), 0);
    // every partial acceptance pauses drafting for a while
    const floor = await drafts(ngram({ min_acceptance: 1 }));
    assert.ok(floor < free, `floor 1: ${floor} drafts, floor 0: ${free}`);
  });

  test('sampled requests still complete with speculation on', async () => {
    const d = await startDaemon(model, configs.at(-1)[1]);
    try {
      const got = await post(d.base, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 50, temperature: 0.8 });
      assert.equal(got.status, 200);
      assert.equal(got.json.usage.completion_tokens, 50);
    } finally { await d.stop(); }
  });

  test('past the draft\'s context (256) sequences go on unspeculated, text unchanged', { skip: !haveReal && 'needs ../shared/models' }, async () => {
    const r = { prompt: 'Once upon a time', max_tokens: 400, temperature: 0, ignore_eos: true };
    const off = await startDaemon(model, []); // the model's own 512
    let ref;
    try { ref = (await post(off.base, '/v1/completions', r)).json.choices[0].text; } finally { await off.stop(); }
    const d = await startDaemon(model, ['--speculative-config', `{"model":"${draft}","num_speculative_tokens":4}`]);
    try {
      const got = await post(d.base, '/v1/completions', r);
      assert.equal(got.status, 200, got.text);
      assert.equal(got.json.usage.completion_tokens, 400);
      assert.equal(got.json.choices[0].text, ref);
      const m = await (await fetch(`${d.base}/metrics`)).text();
      assert.ok(metric(m, 'spec_decode_num_drafts_total') > 0, 'nothing was drafted');
    } finally { await d.stop(); }
  });

  test('a bad speculative config is a clear start-up error', async () => {
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync(process.env.BUILD ? `${process.env.BUILD}/inferd` : 'build/inferd',
      ['--model', model, '--speculative-config', '{"method":"medusa"}'], { encoding: 'utf8' });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /speculative-config/);
    if (haveReal) {
      const bad = spawnSync(process.env.BUILD ? `${process.env.BUILD}/inferd` : 'build/inferd',
        ['--model', target, '--speculative-model', `${FIXTURES}/tiny`, '--port', '0'], { encoding: 'utf8', timeout: 20000 });
      assert.notEqual(bad.status, 0);
      assert.match(bad.stderr, /tokenizer|vocabulary/);
    }
  });
});
