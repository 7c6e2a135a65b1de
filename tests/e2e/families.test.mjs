// Every architecture family end to end through the official `openai` SDK:
// the daemon on each family's tiny random fixture (scripts/make_model.py
// --family; docs/architectures.md), its greedy text equal to the offline
// generator's, alone, streamed, and with four requests batched together
// with n-gram speculation on (the window is shorter than the prompt plus
// output, so Mistral's, Qwen2's and Gemma's local layers slide).
// families_tok.test.mjs runs them again with their real tokenizers.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startDaemon, offline } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const FAMILIES = ['llama3', 'mistral', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3'];
const PROMPT = 'Once upon a time, Lily saw a big dog in the park.';

for (const fam of FAMILIES) {
  const model = `${FIXTURES}/fam-${fam}`;
  describe(`family ${fam}`, () => {
    let d, client, want;
    before(async () => {
      want = offline(model, PROMPT, 32, ['--ignore-eos']);
      d = await startDaemon(model, ['--speculative-config',
        '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}']);
      client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    });
    after(async () => { await d.stop(); });

    test('greedy completion, alone and streamed, equals the offline generator', async () => {
      const body = { model, prompt: PROMPT, max_tokens: 32, temperature: 0, ignore_eos: true };
      const r = await client.completions.create(body);
      assert.equal(r.choices[0].text, want);
      let streamed = '';
      for await (const ev of await client.completions.create({ ...body, stream: true }))
        streamed += ev.choices[0]?.text ?? '';
      assert.equal(streamed, want);
    });

    test('four requests batched together each get the same text', async () => {
      const body = { model, prompt: PROMPT, max_tokens: 32, temperature: 0, ignore_eos: true };
      const rs = await Promise.all([0, 1, 2, 3].map(() => client.completions.create(body)));
      for (const r of rs)
        assert.equal(r.choices[0].text, want);
    });
  });
}
