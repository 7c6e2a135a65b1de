// TLS, API keys and CORS end to end: a CA and certificates made here with
// the openssl command-line tool, the official `openai` SDK trusting that CA
// (and presenting a client certificate where the server asks for one), key
// files reloaded on SIGHUP, and browsers' CORS preflights.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import { startDaemon, post, sseEvents, BUILD, INFERD } from './daemon.mjs';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const MODEL = `${FIXTURES}/tiny`;
fs.mkdirSync(`${BUILD}/tmp`, { recursive: true });
const DIR = fs.mkdtempSync(path.join(`${BUILD}/tmp`, 'security-'));

function openssl(...args) {
  execFileSync('openssl', args, { cwd: DIR, stdio: ['ignore', 'ignore', 'pipe'] });
}

// A CA; a server certificate for 127.0.0.1/localhost and a client
// certificate signed by it; a client certificate from another CA.
function makeCerts() {
  const key = (name) => openssl('genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', `${name}.key`);
  const ca = (name) => {
    key(name);
    openssl('req', '-x509', '-new', '-key', `${name}.key`, '-out', `${name}.pem`, '-days', '2', '-subj', `/CN=${name}`);
  };
  const leaf = (name, caName, ext) => {
    key(name);
    openssl('req', '-new', '-key', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    fs.writeFileSync(path.join(DIR, `${name}.ext`), ext);
    openssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${caName}.pem`, '-CAkey', `${caName}.key`,
      '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`);
  };
  ca('ca');
  ca('rogue-ca');
  leaf('server', 'ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  leaf('rogue', 'rogue-ca', 'extendedKeyUsage=clientAuth\n');
}
makeCerts();
const pem = (name) => fs.readFileSync(path.join(DIR, name));
const file = (name) => path.join(DIR, name);

// An https.Agent trusting the test CA, with a client certificate if named.
function agent(clientName) {
  const o = { ca: pem('ca.pem'), keepAlive: false };
  if (clientName) Object.assign(o, { cert: pem(`${clientName}.pem`), key: pem(`${clientName}.key`) });
  return new https.Agent(o);
}

function httpsStatus(url, ag) {
  return new Promise((resolve, reject) => {
    const req = https.get(url, { agent: ag }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); });
    req.on('error', reject);
    req.setTimeout(20000, () => req.destroy(new Error('timeout')));
  });
}

const tlsHealth = (ag) => async (base) => (await httpsStatus(`${base}/health`, ag)) === 200;
const sdk = (d, ag, apiKey = 'unused') =>
  new OpenAI({ baseURL: `${d.base}/v1`, apiKey, maxRetries: 0, httpAgent: ag });

describe('TLS (--ssl-keyfile, --ssl-certfile)', () => {
  let d;
  before(async () => {
    d = await startDaemon(MODEL, ['--ssl-keyfile', file('server.key'), '--ssl-certfile', file('server.pem')],
      { scheme: 'https', health: tlsHealth(agent()) });
  });
  after(async () => { await d.stop(); });

  test('the openai SDK trusting the test CA completes, streams and chats over HTTPS', async () => {
    const client = sdk(d, agent());
    const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(r.usage.completion_tokens, 8);
    const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, stream: true });
    let n = 0;
    for await (const ch of stream) n += ch.choices.length ? 1 : 0;
    assert.ok(n >= 2);
    assert.match(d.log(), /listening on https:\/\//);
  });

  test('a client that does not trust the CA is refused by its own TLS check', async () => {
    const client = new OpenAI({ baseURL: `${d.base}/v1`, apiKey: 'x', maxRetries: 0, httpAgent: new https.Agent({}) });
    await assert.rejects(client.models.list(), (e) => e instanceof OpenAI.APIConnectionError);
  });

  test('a plain-HTTP client on the TLS port is closed at once, not left hanging; serving goes on', async () => {
    const outcome = await new Promise((resolve) => {
      const s = net.connect(d.port, '127.0.0.1', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
      let got = '';
      s.on('data', (b) => { got += b.toString('latin1'); });
      s.on('error', () => {}); // a reset counts as closed
      s.on('close', () => resolve({ closed: true, got }));
      // far below --timeout (30 s): a hang would show as this firing
      setTimeout(() => { s.destroy(); resolve({ closed: false, got }); }, 10000);
    });
    assert.equal(outcome.closed, true, 'the server closed the plain-HTTP connection');
    assert.doesNotMatch(outcome.got, /HTTP\/1\.1 200/);
    assert.equal(await httpsStatus(`${d.base}/health`, agent()), 200);
  });

  test('plain-HTTP fetch to the TLS port fails instead of hanging', async () => {
    await assert.rejects(fetch(`http://127.0.0.1:${d.port}/health`, { signal: AbortSignal.timeout(10000) }),
      (e) => e.name !== 'TimeoutError');
  });
});

describe('client certificates (--ssl-ca-certs, --ssl-cert-reqs)', () => {
  const tlsArgs = (reqs) => ['--ssl-keyfile', file('server.key'), '--ssl-certfile', file('server.pem'),
    '--ssl-ca-certs', file('ca.pem'), '--ssl-cert-reqs', String(reqs)];

  test('2 (required): the CA\'s client certificate is served; none, or another CA\'s, is refused', async () => {
    const d = await startDaemon(MODEL, tlsArgs(2), { scheme: 'https', health: tlsHealth(agent('client')) });
    try {
      const r = await sdk(d, agent('client')).completions.create({ model: MODEL, prompt: 'Once', max_tokens: 3 });
      assert.equal(r.usage.completion_tokens, 3);
      await assert.rejects(sdk(d, agent()).models.list(), (e) => e instanceof OpenAI.APIConnectionError);
      await assert.rejects(sdk(d, agent('rogue')).models.list(), (e) => e instanceof OpenAI.APIConnectionError);
      assert.match(await d.waitLog(/closed a TLS connection: no client certificate/), /closed a TLS connection: no client certificate/);
    } finally { await d.stop(); }
  });

  test('1 (optional): no certificate is served, another CA\'s certificate is refused', async () => {
    const d = await startDaemon(MODEL, tlsArgs(1), { scheme: 'https', health: tlsHealth(agent()) });
    try {
      assert.equal((await sdk(d, agent()).models.list()).data.length, 1);
      assert.equal((await sdk(d, agent('client')).models.list()).data.length, 1);
      await assert.rejects(sdk(d, agent('rogue')).models.list(), (e) => e instanceof OpenAI.APIConnectionError);
      assert.match(await d.waitLog(/client certificate refused/), /client certificate refused/);
    } finally { await d.stop(); }
  });

  test('inconsistent TLS options are a usage error (exit 2) naming the option', () => {
    const cases = [
      [['--ssl-keyfile', file('server.key')], /--ssl-certfile/],
      [['--ssl-keyfile', file('server.key'), '--ssl-certfile', file('server.pem'), '--ssl-cert-reqs', '2'], /--ssl-ca-certs/],
      [['--ssl-keyfile', file('server.key'), '--ssl-certfile', file('server.pem'), '--ssl-cert-reqs', '5', '--ssl-ca-certs', file('ca.pem')], /--ssl-cert-reqs/],
      [['--ssl-keyfile', file('missing.key'), '--ssl-certfile', file('server.pem')], /--ssl-keyfile.*missing\.key/],
    ];
    for (const [args, msg] of cases) {
      const r = spawnSync(INFERD, ['--model', MODEL, '--port', '0', ...args], { encoding: 'utf8', timeout: 20000 });
      assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, msg);
    }
  });
});

describe('API keys (--api-key repeated, --api-key-file, SIGHUP)', () => {
  const keyFile = file('keys.txt');
  let d;
  before(async () => {
    fs.writeFileSync(keyFile, '# one key per line\n\n  file-key-1  \nfile-key-2\n');
    d = await startDaemon(MODEL, ['--api-key', 'flag-a', '--api-key', 'flag-b', '--api-key-file', keyFile]);
  });
  after(async () => { await d.stop(); });

  const status = async (key) => (await fetch(`${d.base}/v1/models`, key ? { headers: { Authorization: `Bearer ${key}` } } : {})).status;

  test('every key given works; others, prefixes and extensions of a key are 401', async () => {
    for (const k of ['flag-a', 'flag-b', 'file-key-1', 'file-key-2']) assert.equal(await status(k), 200, k);
    for (const k of [null, 'flag', 'flag-a-', 'flag-c', '# one key per line', 'file-key-', '']) assert.equal(await status(k), 401, String(k));
    const r = await fetch(`${d.base}/v1/models`, { headers: { Authorization: 'flag-a' } });
    assert.equal(r.status, 401);
    const good = sdk(d, undefined, 'file-key-2');
    assert.equal((await good.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 2 })).usage.completion_tokens, 2);
  });

  test('SIGHUP reads the key file again; a broken file keeps the keys in force', async () => {
    fs.writeFileSync(keyFile, 'rotated-key\n');
    d.proc.kill('SIGHUP');
    const until = async (cond) => { for (let i = 0; i < 200 && !(await cond()); i++) await new Promise((r) => setTimeout(r, 50)); };
    await until(async () => (await status('rotated-key')) === 200);
    assert.equal(await status('rotated-key'), 200);
    assert.equal(await status('file-key-1'), 401);
    assert.equal(await status('flag-a'), 200); // flags stay
    fs.writeFileSync(keyFile, '\n# emptied by mistake\n');
    d.proc.kill('SIGHUP');
    await until(async () => /no key in it/.test(d.log()));
    assert.match(d.log(), /SIGHUP: .*no key in it.*the keys in force stay/);
    assert.equal(await status('rotated-key'), 200);
    assert.doesNotMatch(d.log(), /rotated-key|flag-a|file-key/); // keys are never logged
  });

  test('INFERD_API_KEY alone, and an empty key file at start-up is a usage error', async () => {
    const e = await startDaemon(MODEL, [], { env: { INFERD_API_KEY: 'env-key' } });
    try {
      assert.equal((await fetch(`${e.base}/v1/models`, { headers: { Authorization: 'Bearer env-key' } })).status, 200);
      assert.equal((await fetch(`${e.base}/v1/models`)).status, 401);
    } finally { await e.stop(); }
    fs.writeFileSync(file('empty-keys.txt'), '\n');
    const r = spawnSync(INFERD, ['--model', MODEL, '--port', '0', '--api-key-file', file('empty-keys.txt')], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /no key in it/);
  });
});

describe('CORS (--allowed-origins and friends)', () => {
  const ORIGIN = 'https://app.example';
  const preflight = (base, origin, method = 'POST', headers = 'authorization, content-type') =>
    fetch(`${base}/v1/chat/completions`, { method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': method, 'Access-Control-Request-Headers': headers } });

  test('off by default: no CORS header, and OPTIONS is not allowed', async () => {
    const d = await startDaemon(MODEL);
    try {
      const r = await fetch(`${d.base}/v1/models`, { headers: { Origin: ORIGIN } });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('access-control-allow-origin'), null);
      const p = await preflight(d.base, ORIGIN);
      assert.equal(p.status, 405);
      assert.equal(p.headers.get('access-control-allow-origin'), null);
    } finally { await d.stop(); }
  });

  test('a listed origin gets its preflight (before the key) and headers on answers, streams and errors; others none', async () => {
    const d = await startDaemon(MODEL, ['--allowed-origins', JSON.stringify([ORIGIN]), '--allowed-methods', '["GET", "POST"]',
      '--allowed-headers', '["Authorization"]', '--api-key', 'k']);
    try {
      let p = await preflight(d.base, ORIGIN);
      assert.equal(p.status, 200);
      assert.equal(p.headers.get('access-control-allow-origin'), ORIGIN);
      assert.equal(p.headers.get('access-control-allow-methods'), 'GET, POST');
      assert.match(p.headers.get('access-control-allow-headers'), /Authorization/);
      assert.match(p.headers.get('access-control-allow-headers'), /Content-Type/);
      assert.equal(p.headers.get('access-control-max-age'), '600');
      assert.equal(p.headers.get('access-control-allow-credentials'), null);
      p = await preflight(d.base, 'https://evil.example');
      assert.equal(p.status, 400);
      assert.equal(await p.text(), 'Disallowed CORS origin');
      assert.equal((await preflight(d.base, ORIGIN, 'DELETE')).status, 400);
      assert.equal((await preflight(d.base, ORIGIN, 'POST', 'x-secret')).status, 400);

      const auth = { Authorization: 'Bearer k', Origin: ORIGIN };
      const s = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 3, stream: true }, auth);
      assert.equal(s.status, 200);
      assert.equal(s.headers.get('access-control-allow-origin'), ORIGIN);
      assert.equal(s.headers.get('vary'), 'Origin');
      assert.equal(sseEvents(s.text).at(-1), '[DONE]');
      const e = await post(d.base, '/v1/completions', { prompt: 'Once' }, { Origin: ORIGIN });
      assert.equal(e.status, 401);
      assert.equal(e.headers.get('access-control-allow-origin'), ORIGIN);
      const other = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 1 }, { ...auth, Origin: 'https://evil.example' });
      assert.equal(other.status, 200); // served: it is the browser that withholds the answer
      assert.equal(other.headers.get('access-control-allow-origin'), null);
    } finally { await d.stop(); }
  });

  test('"*" answers "*"; with --allow-credentials the origin is echoed and credentials allowed', async () => {
    let d = await startDaemon(MODEL, ['--allowed-origins', '["*"]']);
    try {
      const r = await fetch(`${d.base}/v1/models`, { headers: { Origin: ORIGIN } });
      assert.equal(r.headers.get('access-control-allow-origin'), '*');
      const p = await preflight(d.base, 'https://any.example', 'POST', 'x-anything');
      assert.equal(p.status, 200);
      assert.equal(p.headers.get('access-control-allow-headers'), 'x-anything');
      assert.match(p.headers.get('access-control-allow-methods'), /POST/);
    } finally { await d.stop(); }
    d = await startDaemon(MODEL, ['--allowed-origins', '*', '--allow-credentials']);
    try {
      const r = await fetch(`${d.base}/v1/models`, { headers: { Origin: ORIGIN } });
      assert.equal(r.headers.get('access-control-allow-origin'), ORIGIN);
      assert.equal(r.headers.get('access-control-allow-credentials'), 'true');
    } finally { await d.stop(); }
  });

  test('a malformed list is a usage error naming the option', () => {
    const r = spawnSync(INFERD, ['--model', MODEL, '--port', '0', '--allowed-origins', '["a", 3]'], { encoding: 'utf8', timeout: 20000 });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /--allowed-origins/);
  });
});

after(() => fs.rmSync(DIR, { recursive: true, force: true }));
