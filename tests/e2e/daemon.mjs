// Starts the real inferd daemon on a free loopback port for a test file and
// stops it afterwards (SIGTERM, then it must exit 0).
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';

export const BUILD = process.env.BUILD || 'build';
export const INFERD = `${BUILD}/inferd`;

export async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

// opts.health(base) says whether the daemon is ready (default: GET /health
// over plain HTTP is 200); opts.scheme 'https' for a TLS daemon; opts.env
// adds environment variables; opts.readyMs how long start-up may take
// (default 30 s).
export async function startDaemon(model, extra = [], opts = {}) {
  const port = await freePort();
  const args = ['--model', model, '--port', String(port), '--disable-log-stats', ...extra];
  const proc = spawn(INFERD, args, { stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...(opts.env || {}) } });
  let log = '';
  proc.stderr.on('data', (d) => { log += d.toString(); });
  // 'error' too: a binary that cannot start never emits 'exit', and waiting on it hung
  let gone = null;
  const exited = new Promise((resolve) => {
    proc.on('exit', (code, sig) => resolve({ code, sig }));
    proc.on('error', (error) => resolve({ error: error.message }));
  }).then((r) => { gone = r; return r; });
  const base = `${opts.scheme || 'http'}://127.0.0.1:${port}`;
  const healthy = opts.health || (async (b) => (await fetch(`${b}/health`)).status === 200);
  const deadline = Date.now() + (opts.readyMs || 30000);
  for (;;) {
    if (gone) throw new Error(`inferd exited early (${JSON.stringify(gone)}):\n${log}`);
    try {
      if (await healthy(base)) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      // Killed, not left running: a live child keeps the test file's process
      // (and so the whole run) waiting for ever.
      proc.kill('SIGKILL');
      await exited;
      throw Object.assign(new Error(`inferd not ready in ${(opts.readyMs || 30000) / 1000} s:\n${log}`),
        { pid: proc.pid });
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port, base, proc, log: () => log,
    // The log once it matches re (or as it is after ms): the server writes a
    // line about a refused connection after the client has already seen it.
    async waitLog(re, ms = 5000) {
      const end = Date.now() + ms;
      while (!re.test(log) && Date.now() < end)
        await new Promise((r) => setTimeout(r, 20));
      return log;
    },
    async stop() {
      proc.kill('SIGTERM');
      const res = await exited;
      if (res.code !== 0) throw new Error(`inferd exited with ${JSON.stringify(res)}:\n${log}`);
    },
  };
}

// The offline generator's greedy completion (the reference for the API);
// extra: more `inferd generate` options.
export function offline(model, prompt, maxTokens, extra = []) {
  return execFileSync(INFERD, ['generate', '--model', model, '--prompt', prompt,
    '--max-tokens', String(maxTokens), '--quiet', ...extra], { encoding: 'utf8' });
}

export async function post(base, path, body, headers = {}) {
  const r = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Server-sent events of a streaming response, as parsed JSON (and '[DONE]').
export function sseEvents(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    if (!block.startsWith('data: ')) throw new Error(`bad SSE block: ${JSON.stringify(block)}`);
    const data = block.slice(6);
    out.push(data === '[DONE]' ? '[DONE]' : JSON.parse(data));
  }
  return out;
}
