// Robustness: hostile and broken clients never crash, hang or leak the
// daemon, and good requests keep working after each of them.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startDaemon, post, freePort, INFERD } from './daemon.mjs';
import { spawn } from 'node:child_process';

const FIXTURES = process.env.INFERD_TEST_FIXTURES || 'build/fixtures';
const model = `${FIXTURES}/tiny`;

// A raw TCP exchange: sends chunks (with optional pauses), returns what came back.
function raw(port, chunks, { pauseMs = 0, waitMs = 2000, destroyAfter = false } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    let done = false;
    const finish = () => { if (!done) { done = true; s.destroy(); resolve(got); } };
    s.on('data', (d) => { got += d.toString(); });
    s.on('close', finish);
    s.on('error', finish);
    s.on('connect', async () => {
      for (const c of chunks) {
        if (s.destroyed) break;
        s.write(c);
        if (pauseMs) await new Promise((r) => setTimeout(r, pauseMs));
      }
      if (destroyAfter) { s.resetAndDestroy(); finish(); return; }
      setTimeout(finish, waitMs);
    });
  });
}

function request(body, path = '/v1/completions', extra = '') {
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}

async function stillServes(d) {
  const r = await post(d.base, '/v1/completions', { prompt: 'Once', max_tokens: 3, temperature: 0 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.choices.length, 1);
}

async function idle(d) {
  // every request gone: nothing running or waiting, all KV blocks back
  for (let i = 0; i < 200; i++) {
    const m = await (await fetch(`${d.base}/metrics`)).text();
    const val = (name) => Number(new RegExp(`^inferd:${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(m)[1]);
    if (val('num_requests_running') === 0 && val('num_requests_waiting') === 0 &&
        val('kv_cache_usage_perc') === 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail('the engine did not return to idle');
}

describe('robustness', () => {
  let d;
  before(async () => { d = await startDaemon(model, ['--timeout', '2', '--max-connections', '64', '--request-timeout', '3']); });
  after(async () => { await d.stop(); });

  test('random and malformed bodies get 400 JSON errors (fixed seed)', async () => {
    let seed = 12345;
    const rnd = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed; };
    const bases = ['{"prompt":"hi","max_tokens":3}', '{"messages":[{"role":"user","content":"x"}]}'];
    for (let i = 0; i < 300; i++) {
      let b = bases[i % 2];
      const k = rnd() % 4;
      if (k === 0) b = Array.from({ length: rnd() % 64 }, () => String.fromCharCode(rnd() % 256)).join('');
      else if (k === 1) b = b.slice(0, rnd() % b.length);
      else if (k === 2) { const p = rnd() % b.length; b = b.slice(0, p) + String.fromCharCode(rnd() % 128) + b.slice(p + 1); }
      else b = b.replace(/"x"|"hi"|3/, ['null', '[]', '{}', '-1', '1e999', '"\\ud800"', 'true'][rnd() % 7]);
      const path = i % 2 ? '/v1/chat/completions' : '/v1/completions';
      const r = await post(d.base, path, b);
      assert.ok([200, 400].includes(r.status), `status ${r.status} for ${JSON.stringify(b)}`);
      if (r.status === 400) assert.equal(typeof r.json.error.message, 'string');
    }
    const bad = await post(d.base, '/v1/completions', Buffer.from([0x7b, 0x22, 0x70, 0x72, 0x6f, 0x6d, 0x70, 0x74, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]));
    assert.equal(bad.status, 400);
    await stillServes(d);
  });

  test('non-HTTP garbage and truncated requests are dropped', async () => {
    await raw(d.port, ['\x00\x01\x02 not http at all\r\n\r\n'], { waitMs: 300 });
    // headers promise 100 bytes, 10 arrive, then silence: the timeout closes it
    const got = await raw(d.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt":'], { waitMs: 4000 });
    assert.ok(!got.includes('200 OK'));
    // and a client that vanishes mid-body
    await raw(d.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pr'], { destroyAfter: true });
    await stillServes(d);
  });

  test('a slow but live client is served; a stalled one is cut off', async () => {
    const body = JSON.stringify({ prompt: 'Once', max_tokens: 2, temperature: 0 });
    const req = request(body);
    const parts = req.match(/.{1,16}/gs);
    const slow = await raw(d.port, parts, { pauseMs: 30, waitMs: 1500 });
    assert.match(slow, /^HTTP\/1\.1 200/);
    const t0 = Date.now();
    const stalled = await raw(d.port, ['POST /v1/completions HTTP/1.1\r\nHost: x\r\n'], { waitMs: 8000 });
    assert.ok(Date.now() - t0 < 7500, 'the stalled connection was not closed by the timeout');
    assert.ok(!stalled.includes('200'));
    await stillServes(d);
  });

  test('clients vanishing mid-stream free everything', async () => {
    const body = JSON.stringify({ prompt: 'Once', max_tokens: 200, temperature: 0, stream: true, ignore_eos: true });
    const socks = [];
    for (let i = 0; i < 12; i++) {
      socks.push(new Promise((resolve) => {
        const s = net.connect(d.port, '127.0.0.1', () => s.write(request(body)));
        s.once('data', () => { s.resetAndDestroy(); resolve(); });
        s.on('error', resolve);
      }));
    }
    await Promise.all(socks);
    // also non-streaming requests whose clients leave before the answer
    for (let i = 0; i < 4; i++) {
      await raw(d.port, [request(JSON.stringify({ prompt: 'Once', max_tokens: 200, ignore_eos: true }))], { destroyAfter: true });
    }
    await idle(d);
    await stillServes(d);
  });

  test('a client trickling its request slower than --request-timeout is cut off', async () => {
    const body = JSON.stringify({ prompt: 'Once', max_tokens: 2 });
    const req = request(body);
    // one byte every 200 ms never trips the 2 s idle timeout, but the whole
    // request would take far longer than the 3 s request deadline
    const t0 = Date.now();
    const got = await raw(d.port, req.split(''), { pauseMs: 200, waitMs: 100 });
    assert.ok(Date.now() - t0 < 20000);
    assert.ok(!got.includes('200 OK'), 'the trickled request was served');
    await stillServes(d);
  });

  test('connections beyond the limit are refused, the server survives', async () => {
    const held = [];
    for (let i = 0; i < 80; i++) {
      held.push(await new Promise((resolve) => {
        const s = net.connect(d.port, '127.0.0.1', () => resolve(s));
        s.on('error', () => resolve(s));
      }));
    }
    for (const s of held) s.destroy();
    await new Promise((r) => setTimeout(r, 200));
    await stillServes(d);
  });
});

describe('wake-ups under contention', () => {
  // Regression: the loop's list of connections to resume could be cut short
  // when the engine queued one of them again mid-walk, leaving a request
  // suspended forever. It showed when the CPU was oversubscribed.
  test('hundreds of concurrent requests on a busy CPU all complete', async () => {
    const hogs = [0, 1].map(() => spawn('sh', ['-c', 'while :; do :; done'], { stdio: 'ignore' }));
    const d = await startDaemon(model);
    try {
      for (let round = 0; round < 8; round++) {
        const all = Array.from({ length: 32 }, (_, i) => {
          const ac = new AbortController();
          const t = setTimeout(() => ac.abort(), 60000); // a hang, not slowness
          return fetch(`${d.base}/v1/completions`, {
            method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json' },
            body: JSON.stringify({ prompt: 'Once', max_tokens: 20 + i, temperature: 0, ignore_eos: true, stream: i % 2 === 0 }),
          }).then((r) => r.text()).finally(() => clearTimeout(t));
        });
        for (const text of await Promise.all(all)) assert.ok(text.length > 0);
      }
    } finally {
      for (const h of hogs) h.kill();
      await d.stop();
    }
  });
});

describe('overload', () => {
  test('past --max-waiting queued requests, 503 with Retry-After; then it recovers', async () => {
    const d = await startDaemon(model, ['--max-waiting', '2', '--max-num-seqs', '1']);
    try {
      const rs = await Promise.all(Array.from({ length: 24 }, () => post(d.base, '/v1/completions',
        { prompt: 'Once', max_tokens: 200, temperature: 0, ignore_eos: true })));
      const busy = rs.filter((r) => r.status === 503);
      assert.ok(busy.length > 0, 'nothing was refused');
      assert.ok(rs.some((r) => r.status === 200));
      for (const r of busy) {
        assert.equal(r.headers.get('retry-after'), '1');
        assert.equal(typeof r.json.error.message, 'string');
      }
      for (const r of rs) assert.ok([200, 503].includes(r.status));
      await stillServes(d);
    } finally { await d.stop(); }
  });
});

describe('shutdown', () => {
  test('SIGTERM lets in-flight streams finish, then exits 0', async () => {
    // one sequence at a time, six queued: most are still in flight at SIGTERM
    const d = await startDaemon(model, ['--shutdown-grace', '20', '--max-num-seqs', '1']);
    const readAll = async (res) => {
      let text = '';
      const reader = res.body.getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return text;
        text += Buffer.from(value).toString();
      }
    };
    const started = [];
    for (let i = 0; i < 6; i++) {
      started.push(fetch(`${d.base}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt: 'Once', max_tokens: 240, temperature: 0, stream: true, ignore_eos: true }),
      }));
    }
    const responses = await Promise.all(started);
    const bodies = responses.map(readAll);
    d.proc.kill('SIGTERM');
    for (const text of await Promise.all(bodies))
      assert.ok(text.trimEnd().endsWith('data: [DONE]'), 'a stream was cut');
    const code = await new Promise((resolve) => (d.proc.exitCode !== null ? resolve(d.proc.exitCode) : d.proc.on('exit', (c) => resolve(c))));
    assert.equal(code, 0);
  });

  test('past the grace period, in-flight requests are cancelled and it still exits 0', async () => {
    const port = await freePort();
    const proc = spawn(INFERD, ['--model', model, '--port', String(port), '--shutdown-grace', '0',
      '--disable-log-stats'], { stdio: 'ignore' });
    const exited = new Promise((resolve) => proc.on('exit', (c) => resolve(c)));
    for (let i = 0; i < 200; i++) {
      try { if ((await fetch(`http://127.0.0.1:${port}/health`)).status === 200) break; } catch { /* not yet */ }
      await new Promise((r) => setTimeout(r, 50));
    }
    const res = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once', max_tokens: 250, temperature: 0, stream: true, ignore_eos: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    proc.kill('SIGTERM');
    try { while (!(await reader.read()).done) { /* drain */ } } catch { /* cut */ }
    assert.equal(await exited, 0);
  });
});

// The harness itself: a daemon that is not ready in time is killed before
// startDaemon throws (left running, it kept the test file's process, and
// so the whole e2e run, waiting for ever).
// The probe never says ready: with readyMs alone, a daemon up before the
// first probe (a loaded machine, a slow first fetch) passed, and was left running.
test('startDaemon kills a daemon that is not ready in time', async () => {
  const err = await startDaemon(model, [], { readyMs: 300, health: async () => false })
    .then(async (d) => { await d.stop(); return null; }, (e) => e);
  assert.ok(err, 'a probe that never answers ready was taken as ready');
  assert.match(err.message, /not ready in 0.3 s/);
  assert.throws(() => process.kill(err.pid, 0), { code: 'ESRCH' });
});
