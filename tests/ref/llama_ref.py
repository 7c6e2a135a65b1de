#!/usr/bin/python3
"""Independent float64 numpy reference of the Hugging Face Llama forward pass.

  llama_ref.py --model DIR (--tokens 1,2,3 | --prompt TEXT) [--no-bos]
               [--logits OUT.npy] [--generate N] [--stop-at-eos]
               [--quantization int8]

Why: the C engine's kernels (CPU and CUDA, every dtype, batched, paged, speculative)
are checked against this. It shares no code with the engine or with ../shared/tools,
reads the model files itself and computes in float64, so its logits are the function
the weights define, up to rounding far below float32's.

--logits writes float64 logits [n_tokens, vocab] for every input position.
--hidden writes the float64 final hidden state [n_tokens, hidden] (after the
final RMSNorm, the LM head's input: what an MLP speculator reads).
--generate N greedily continues the input (argmax, lowest id on ties) for N tokens
(or until EOS is emitted with --stop-at-eos) with a KV cache, and prints one JSON
line: {"prompt_ids", "ids", "text", "min_margin"}; min_margin is the smallest
top-1 minus top-2 logit gap over the generated steps: when it is far above float32
rounding, a float32 engine must produce the same ids.
--quantization int8 computes the seven matrices of each layer as inferd's W8A8
does (symmetric int8, one scale per weight row, one per activation row: q =
round-half-even(clip(v * 127 / max|v|)), y = (qx . qw) * sx * sw); weights are
quantized in float32 as the engine does, activations in float64; with --logits
it prints {"near_ties": N, "first_tie": P}: the activations that fell within
2e-5 of a step of a rounding boundary (where a float32 engine may round one
step apart), and the first position holding one (null if none; positions
before it cannot be moved by them, attention being causal).
Needs only numpy, and sentencepiece for --prompt and "text" (Debian's /usr/bin/python3).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


# ---------------------------------------------------------------- model files

def read_safetensors(path):
    """{name: float64 array} from one safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        begin, end = h["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[h["dtype"]])
        if h["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float64).reshape(h["shape"])
    return out


def load_weights(model_dir):
    """All tensors of a model directory: model.safetensors, or the shards its index names."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    w = {}
    for name in files:
        w.update(read_safetensors(os.path.join(model_dir, name)))
    return w


class Config:
    """The HF LlamaConfig fields the forward pass needs, with HF's defaults."""

    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)
        if c.get("rope_scaling"):
            sys.exit("llama_ref: rope_scaling is not supported")
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        self.head_dim = c.get("head_dim") or self.hidden // self.heads
        self.vocab = c["vocab_size"]
        self.theta = c.get("rope_theta", 10000.0)
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.tied = c.get("tie_word_embeddings", False)
        eos = c.get("eos_token_id", 2)
        self.eos = set(eos if isinstance(eos, list) else [eos])


# ---------------------------------------------------------------- forward pass

def rms_norm(x, w, eps):
    """x * 1/sqrt(mean(x^2) + eps) * w over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    """HF Llama rotate-half RoPE on x [heads, n, head_dim] at positions pos [n]."""
    hd = x.shape[-1]
    inv_freq = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None].astype(np.float64) * inv_freq[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1)
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + np.concatenate([-x2, x1], axis=-1) * sin


def quantize(v):
    """Rows of v as symmetric int8 (held in float64, exact), their scales, and
    per row how many values fell within 2e-5 of a step of a rounding boundary
    (where a float32 engine may round one step the other way), in v's own
    precision:
    amax = max |v|, q = rint(clip(v * (127 / amax))), scale = amax / 127; a
    zero row is all 0 with scale 0."""
    amax = np.abs(v).max(axis=-1)
    one27 = v.dtype.type(127)
    inv = np.where(amax > 0, one27 / np.where(amax > 0, amax, 1), 0).astype(v.dtype)
    t = np.clip(v * inv[:, None], -one27, one27)
    ties = (np.abs(t - np.floor(t) - 0.5) < 2e-5).sum(axis=-1)
    return np.rint(t).astype(np.float64), (amax / one27).astype(np.float64), ties


def silu(x):
    """x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))


class Llama:
    """Llama forward with a KV cache: forward(tokens) continues the cached sequence."""

    def __init__(self, model_dir, quantization=None):
        self.c = Config(os.path.join(model_dir, "config.json"))
        self.w = load_weights(model_dir)
        self.quant = quantization
        self.qw = {}
        self.near_ties = 0
        self.first_tie = None  # position of the first activation row with one
        self.start = 0         # position of the current forward's first row
        self.lm_head = self.w["model.embed_tokens.weight"] if self.c.tied else self.w["lm_head.weight"]
        self.reset()

    def linear(self, x, name):
        """x [n, in] times the transposed weight: as stored, or W8A8 int8."""
        if self.quant != "int8":
            return x @ self.w[name].T
        if name not in self.qw:
            w = self.w[name].astype(np.float32)
            self.qw[name] = quantize(w)[:2]  # weights: quantized in float32, as the engine does
        qw, sw = self.qw[name]
        qx, sx, ties = quantize(x)
        self.near_ties += int(ties.sum())
        rows = np.nonzero(ties)[0]
        if rows.size:
            at = self.start + int(rows[0])
            self.first_tie = at if self.first_tie is None else min(self.first_tie, at)
        return (qx @ qw.T) * sx[:, None] * sw[None, :]

    def reset(self):
        """Forget the cached sequence."""
        self.k = [np.zeros((self.c.kv_heads, 0, self.c.head_dim)) for _ in range(self.c.layers)]
        self.v = [np.zeros((self.c.kv_heads, 0, self.c.head_dim)) for _ in range(self.c.layers)]

    def attention(self, i, x, pos):
        """Causal GQA self-attention of layer i for the new rows x [n, hidden] at pos."""
        c, p = self.c, f"model.layers.{i}.self_attn."
        n = x.shape[0]
        heads = lambda t, h: t.reshape(n, h, c.head_dim).transpose(1, 0, 2)  # noqa: E731
        q = rope(heads(self.linear(x, p + "q_proj.weight"), c.heads), pos, c.theta)
        k = rope(heads(self.linear(x, p + "k_proj.weight"), c.kv_heads), pos, c.theta)
        v = heads(self.linear(x, p + "v_proj.weight"), c.kv_heads)
        self.k[i] = np.concatenate([self.k[i], k], axis=1)
        self.v[i] = np.concatenate([self.v[i], v], axis=1)
        group = c.heads // c.kv_heads  # query head h reads kv head h // group
        kk = np.repeat(self.k[i], group, axis=0)
        vv = np.repeat(self.v[i], group, axis=0)
        s = q @ kk.transpose(0, 2, 1) / np.sqrt(c.head_dim)  # [heads, n, t]
        s = np.where(np.arange(kk.shape[1])[None, :] <= pos[:, None], s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (s / s.sum(axis=-1, keepdims=True)) @ vv  # [heads, n, head_dim]
        return self.linear(o.transpose(1, 0, 2).reshape(n, c.heads * c.head_dim), p + "o_proj.weight")

    def mlp(self, i, x):
        """SwiGLU MLP of layer i: down(silu(gate(x)) * up(x))."""
        p = f"model.layers.{i}.mlp."
        g = self.linear(x, p + "gate_proj.weight")
        u = self.linear(x, p + "up_proj.weight")
        return self.linear(silu(g) * u, p + "down_proj.weight")

    def forward(self, tokens):
        """Logits [n, vocab] for tokens appended to the cached sequence."""
        c = self.c
        start = self.start = self.k[0].shape[1]
        pos = np.arange(start, start + len(tokens))
        x = self.w["model.embed_tokens.weight"][np.asarray(tokens, dtype=np.int64)]
        for i in range(c.layers):
            p = f"model.layers.{i}."
            x = x + self.attention(i, rms_norm(x, self.w[p + "input_layernorm.weight"], c.eps), pos)
            x = x + self.mlp(i, rms_norm(x, self.w[p + "post_attention_layernorm.weight"], c.eps))
        self.hidden = rms_norm(x, self.w["model.norm.weight"], c.eps)  # what a speculator reads
        return self.hidden @ self.lm_head.T


# ---------------------------------------------------------------- greedy decoding

def greedy_pick(logits):
    """(argmax with the lowest id on ties, top-1 minus top-2 gap) of one logit row."""
    best = int(np.argmax(logits))
    rest = np.delete(logits, best)
    return best, float(logits[best] - rest.max()) if rest.size else float("inf")


def generate(model, prompt_ids, n, stop_at_eos):
    """Greedy continuation: (prompt logits [len, vocab], new ids, smallest margin)."""
    model.reset()
    prompt_logits = model.forward(prompt_ids)
    model.prompt_hidden = model.hidden
    last, ids, margin = prompt_logits[-1], [], float("inf")
    for _ in range(n):
        tok, gap = greedy_pick(last)
        ids.append(tok)
        margin = min(margin, gap)
        if len(ids) == n or (stop_at_eos and tok in model.c.eos):
            break
        last = model.forward([tok])[-1]
    return prompt_logits, ids, margin


def tokenizer(model_dir):
    """SentencePiece processor for DIR/tokenizer.model, or None where there is none."""
    path = os.path.join(model_dir, "tokenizer.model")
    if not os.path.exists(path):
        return None
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=path)


def continuation_text(sp, prompt_ids, ids):
    """Decoded text of ids as it follows the prompt (prompt's decode cut from the front)."""
    full, head = sp.decode(list(prompt_ids) + list(ids)), sp.decode(list(prompt_ids))
    return full[len(head):] if full.startswith(head) else full


def parse_args():
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face Llama directory")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated input ids, used as given")
    src.add_argument("--prompt", help="text, tokenized with DIR/tokenizer.model")
    ap.add_argument("--no-bos", action="store_true", help="no BOS before --prompt")
    ap.add_argument("--logits", metavar="OUT.npy", help="write float64 logits of the input")
    ap.add_argument("--hidden", metavar="OUT.npy",
                    help="write the float64 final hidden state (after the final norm) of the input")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="greedy tokens to generate")
    ap.add_argument("--stop-at-eos", action="store_true", help="stop after emitting EOS")
    ap.add_argument("--quantization", choices=["none", "int8"], default="none",
                    help="int8: the layers' matrices as inferd's W8A8")
    return ap.parse_args()


def main():
    a = parse_args()
    model = Llama(a.model, a.quantization)
    sp = tokenizer(a.model)
    if a.prompt is not None:
        if sp is None:
            sys.exit(f"llama_ref: no tokenizer.model in {a.model}")
        prompt_ids = ([] if a.no_bos else [sp.bos_id()]) + sp.encode(a.prompt)
    else:
        prompt_ids = [int(t) for t in a.tokens.split(",") if t.strip()]
    if not prompt_ids or min(prompt_ids) < 0 or max(prompt_ids) >= model.c.vocab:
        sys.exit("llama_ref: input ids empty or outside the vocabulary")
    logits, ids, margin = generate(model, prompt_ids, a.generate, a.stop_at_eos)
    if a.logits:
        np.save(a.logits, logits)
        if a.quantization == "int8" and not a.generate:
            print(json.dumps({"near_ties": model.near_ties, "first_tie": model.first_tie}))
    if a.hidden:
        np.save(a.hidden, model.prompt_hidden)
    if a.generate:
        print(json.dumps({"prompt_ids": prompt_ids, "ids": ids,
                          "text": continuation_text(sp, prompt_ids, ids) if sp else None,
                          "min_margin": margin}))


if __name__ == "__main__":
    main()
