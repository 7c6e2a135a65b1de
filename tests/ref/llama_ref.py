#!/usr/bin/python3
"""Independent float64 numpy reference of the Hugging Face decoder forward pass:
Llama 2/3, Mistral, Qwen 2/2.5/3, Gemma 2/3 (text) and Phi-3/4, each read from
its config.json with Hugging Face's defaults and equations (modeling_llama,
modeling_qwen2/3, modeling_gemma2/3, modeling_phi3, modeling_rope_utils).

  llama_ref.py --model DIR (--tokens 1,2,3 | --prompt TEXT) [--no-bos]
               [--logits OUT.npy] [--generate N] [--stop-at-eos]
               [--quantization int8|int4]

Why: the C engine's kernels (CPU and CUDA, every dtype, batched, paged, speculative)
are checked against this. It shares no code with the engine or with ../shared/tools,
reads the model files itself and computes in float64, so its logits are the function
the weights define, up to rounding far below float32's.

--logits writes float64 logits [n_tokens, vocab] for every input position.
--hidden writes the float64 final hidden state [n_tokens, hidden] (after the
final RMSNorm, the LM head's input: what an MLP speculator reads).
--generate N greedily continues the input (argmax, lowest id on ties) for N tokens
(or until EOS is emitted with --stop-at-eos) with a KV cache, and prints one JSON
line: {"prompt_ids", "ids", "text", "min_margin", "first_tie"}; min_margin is the
smallest top-1 minus top-2 logit gap over the generated steps: when it is far above
float32 rounding, a float32 engine must produce the same ids. first_tie (quantized
runs; null otherwise or if none) is the first position whose activations came near
a rounding boundary: from the token that position's logits pick on, a float32
engine may go its own way.
--quantization int8 computes the seven matrices of each layer as inferd's W8A8
does (symmetric int8, one scale per weight row, one per activation row: q =
round-half-even(clip(v * 127 / max|v|)), y = (qx . qw) * sx * sw); weights are
quantized in float32 as the engine does, activations in float64; with --logits
it prints {"near_ties": N, "first_tie": P}: the activations that fell within
2e-5 of a step of a rounding boundary (where a float32 engine may round one
step apart), and the first position holding one (null if none; positions
before it cannot be moved by them, attention being causal).
--quantization int4 computes them as inferd's W4A8 (cpu/q4.h): weights in
groups of 32 along the input (zero-padded), per group a = the value of largest
|a|, d = float16(a / -8), q = clip(round-half-even(w * (1 / d)), -8, 7) in
float32; activations as for int8; y = sx * sum over groups of d * (qx . q).
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
    """{name: float64 array} from one safetensors file (F32, F16, BF16; I8, a
    W8A8 checkpoint's weights)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        begin, end = h["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I8": "<i1"}[h["dtype"]])
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


FAMILIES = {  # architectures[0] / model_type -> family
    "LlamaForCausalLM": "llama", "llama": "llama",
    "MistralForCausalLM": "mistral", "mistral": "mistral",
    "Qwen2ForCausalLM": "qwen2", "qwen2": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "qwen3": "qwen3",
    "Gemma2ForCausalLM": "gemma2", "gemma2": "gemma2",
    "Gemma3ForCausalLM": "gemma3", "gemma3_text": "gemma3",
    "Phi3ForCausalLM": "phi3", "phi3": "phi3",
}


def rope_inv_freq(c, scaling, theta, dim):
    """(inv_freq, attention factor, long inv_freq or None, long-from position)
    of HF's rope_init_fn for rope_scaling `scaling` over `dim` rotary dims."""
    base = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)  # theta^(2i/dim)
    inv = 1.0 / base
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in ("default", "dynamic"):
        # dynamic NTK changes nothing up to max_position_embeddings (the context limit)
        return inv, 1.0, None, None
    factor = scaling.get("factor", 1.0)
    if kind == "linear":
        return inv / factor, 1.0, None, None
    if kind == "llama3":
        lo, hi = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        return np.where(medium, smoothed, scaled), 1.0, None, None
    if kind == "yarn":
        old = scaling.get("original_max_position_embeddings") or c["max_position_embeddings"]
        fast, slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

        def corr_dim(rot):
            return dim * np.log(old / (rot * 2 * np.pi)) / (2 * np.log(theta))
        low, high = corr_dim(fast), corr_dim(slow)
        if scaling.get("truncate", True):
            low, high = np.floor(low), np.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extra = 1 - ramp
        inv = (1.0 / (factor * base)) * (1 - extra) + (1.0 / base) * extra

        def mscale(s, m=1.0):
            return 1.0 if s <= 1 else 0.1 * m * np.log(s) + 1.0
        att = scaling.get("attention_factor")
        if att is None:
            ms, msa = scaling.get("mscale"), scaling.get("mscale_all_dim")
            att = mscale(factor, ms) / mscale(factor, msa) if ms and msa else mscale(factor)
        return inv, att, None, None
    if kind in ("longrope", "su"):
        old = c.get("original_max_position_embeddings") or scaling.get("original_max_position_embeddings")
        if c.get("original_max_position_embeddings"):
            factor = c["max_position_embeddings"] / old
        att = scaling.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else np.sqrt(1 + np.log(factor) / np.log(old))
        short = 1.0 / (np.asarray(scaling["short_factor"], dtype=np.float64) * base)
        long = 1.0 / (np.asarray(scaling["long_factor"], dtype=np.float64) * base)
        return short, att, long, old
    sys.exit(f"llama_ref: rope_scaling type {kind!r} is not supported")


class Config:
    """What the forward pass needs from a HF config.json, with each family's
    HF defaults (LlamaConfig, MistralConfig, Qwen2/Qwen3Config, Gemma2Config,
    Gemma3TextConfig, Phi3Config)."""

    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)
        arch = (c.get("architectures") or [c.get("model_type")])[0]
        if arch not in FAMILIES:
            sys.exit(f"llama_ref: architecture {arch!r} is not supported")
        fam = self.family = FAMILIES[arch]
        gemma = fam in ("gemma2", "gemma3")
        self.hidden = c["hidden_size"]
        self.inter = c["intermediate_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        hd_default = {"qwen3": 128, "gemma2": 256, "gemma3": 256}.get(fam, self.hidden // self.heads)
        self.head_dim = c.get("head_dim") or hd_default
        self.vocab = c["vocab_size"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.tied = c.get("tie_word_embeddings", gemma)
        self.gemma_norm = gemma                       # x * (1 + w)
        self.sandwich = gemma                         # post-attention / post-MLP norms
        self.qk_norm = fam in ("qwen3", "gemma3")
        self.fused = fam == "phi3"
        self.embed_scale = np.sqrt(self.hidden) if gemma else 1.0
        act = c.get("hidden_activation") or c.get("hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")
        if act not in ("silu", "gelu_pytorch_tanh"):
            sys.exit(f"llama_ref: activation {act!r} is not supported")
        self.act = act
        if c.get("mlp_bias"):
            sys.exit("llama_ref: mlp_bias is not supported")
        self.bias_qkv = bool(c.get("attention_bias")) or fam == "qwen2"
        self.bias_o = bool(c.get("attention_bias"))
        self.scale = self.head_dim ** -0.5
        self.attn_cap = self.logit_cap = None
        if gemma:
            self.scale = c.get("query_pre_attn_scalar", 256) ** -0.5
            dflt = 50.0 if fam == "gemma2" else None
            self.attn_cap = c.get("attn_logit_softcapping", dflt) if "attn_logit_softcapping" in c else dflt
            dflt = 30.0 if fam == "gemma2" else None
            self.logit_cap = c.get("final_logit_softcapping", dflt) if "final_logit_softcapping" in c else dflt
        # which layers slide, and over how many positions
        w = c.get("sliding_window", 4096 if gemma else None)
        if fam in ("qwen2", "qwen3"):
            if not c.get("use_sliding_window", False):
                w = None
            mwl = c.get("max_window_layers", 28)
            sliding = [w is not None and i >= mwl for i in range(self.layers)]
        elif gemma:
            pat = c.get("sliding_window_pattern", 2 if fam == "gemma2" else 6)
            sliding = [bool((i + 1) % pat) for i in range(self.layers)]
        else:
            sliding = [bool(w)] * self.layers
        if c.get("layer_types") and w:
            sliding = [t == "sliding_attention" for t in c["layer_types"]]
        self.window = [w if s else None for s in sliding]
        # RoPE: global layers, and Gemma 3's local ones with their own base and no scaling
        theta = c.get("rope_theta", 1e6 if fam == "gemma3" else 10000.0)
        self.rot = int(self.head_dim * c.get("partial_rotary_factor", 1.0))
        glob = rope_inv_freq(c, c.get("rope_scaling"), theta, self.rot)
        local = rope_inv_freq(c, None, c.get("rope_local_base_freq", 10000.0), self.rot) \
            if fam == "gemma3" else glob
        self.rope = [local if s else glob for s in sliding]
        eos = c.get("eos_token_id", 2)
        self.eos = set(eos if isinstance(eos, list) else [eos])


# ---------------------------------------------------------------- forward pass

def rms_norm(x, w, eps, one_plus=False):
    """x * 1/sqrt(mean(x^2) + eps) * w (or * (1 + w), Gemma) over the last axis."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * ((1.0 + w) if one_plus else w)


def rope(x, pos, r, rot):
    """HF rotate-half RoPE on the first rot dims of x [heads, n, head_dim] at
    positions pos [n]; r = (inv_freq, attention factor, long inv_freq, long from)."""
    inv, att, inv_long, long_from = r
    per_pos = np.where((pos >= long_from)[:, None], inv_long[None, :], inv[None, :]) \
        if inv_long is not None else inv[None, :]
    ang = pos[:, None].astype(np.float64) * per_pos
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=-1) * att
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=-1) * att
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    return np.concatenate([xr * cos + np.concatenate([-x2, x1], axis=-1) * sin, xp], axis=-1)


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


def quantize4(w):
    """Weights [out, in] as inferd's int4 groups, in float32 as the engine
    does: q [out, G, 32] (float64, exact) and d [out, G] (float64)."""
    out, k = w.shape
    g = -(-k // 32)
    wp = np.zeros((out, g * 32), np.float32)
    wp[:, :k] = w
    wp = wp.reshape(out, g, 32)
    idx = np.abs(wp).argmax(axis=-1)
    a = np.take_along_axis(wp, idx[..., None], axis=-1)[..., 0]
    d = (a / np.float32(-8)).astype(np.float16)
    d = np.where(np.isinf(d), np.copysign(np.float16(65504), d), d).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0))
    q = np.clip(np.rint(wp * inv[..., None]), -8, 7)
    return q.astype(np.float64), d.astype(np.float64)


def silu(x):
    """x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """GELU, tanh approximation (PyTorch's approximate='tanh')."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def softcap(x, cap):
    """cap * tanh(x / cap), or x when cap is None."""
    return x if not cap else cap * np.tanh(x / cap)


def fused_rows(c):
    """Phi-3's fused linears: {fused: [(part, first row, end row)]}, rows q|k|v, gate|up."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    return {"self_attn.qkv_proj": [("self_attn.q_proj", 0, q), ("self_attn.k_proj", q, q + kv),
                                   ("self_attn.v_proj", q + kv, q + 2 * kv)],
            "mlp.gate_up_proj": [("mlp.gate_proj", 0, c.inter), ("mlp.up_proj", c.inter, 2 * c.inter)]}


def split_fused(w, c):
    """Phi-3's qkv_proj and gate_up_proj as the separate HF names (fused_rows);
    a W8A8 checkpoint's weight_scale the same way (one value per tensor: to each part)."""
    for i in range(c.layers):
        p = f"model.layers.{i}."
        for suffix in ("weight", "weight_scale"):
            for fused, parts in fused_rows(c).items():
                if p + fused + "." + suffix not in w:
                    continue
                v = w.pop(p + fused + "." + suffix)
                if v.size == 1:
                    v = np.broadcast_to(v.reshape(1, 1), (parts[-1][2], 1))
                for leaf, r0, r1 in parts:
                    w[p + leaf + "." + suffix] = v[r0:r1]


def embed_scale(model_dir, c):
    """Gemma's sqrt(hidden) as HF multiplies it: a tensor of the activations'
    dtype, so rounded to bf16 / f16 in such a checkpoint."""
    if c.embed_scale == 1.0:
        return 1.0
    with open(os.path.join(model_dir, "config.json")) as f:
        dt = json.load(f).get("torch_dtype", "float32")
    s = np.float32(c.embed_scale)
    if dt == "bfloat16":
        b = int(np.array(s).view(np.uint32))
        b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        return float(np.array(b << 16, dtype=np.uint32).view(np.float32))
    if dt == "float16":
        return float(np.float16(s))
    return float(s)


class Llama:
    """Decoder forward with a KV cache: forward(tokens) continues the cached sequence."""

    def __init__(self, model_dir, quantization=None):
        self.c = Config(os.path.join(model_dir, "config.json"))
        self.w = load_weights(model_dir)
        if self.c.fused:
            split_fused(self.w, self.c)
        self.escale = embed_scale(model_dir, self.c)
        self.quant = quantization
        self.qw = {}
        self.near_ties = 0
        self.first_tie = None  # position of the first activation row with one
        self.start = 0         # position of the current forward's first row
        self.lm_head = self.w["model.embed_tokens.weight"] if self.c.tied else self.w["lm_head.weight"]
        self.reset()

    def linear(self, x, name, bias=False):
        """x [n, in] times the transposed weight (as stored, W8A8 int8 or W4A8
        int4), plus its bias."""
        b = self.w[name[:-len("weight")] + "bias"] if bias else 0.0
        if self.quant not in ("int8", "int4"):
            return x @ self.w[name].T + b
        if name not in self.qw:
            w = self.w[name].astype(np.float32)
            # weights: quantized in float32, as the engine does
            self.qw[name] = quantize(w)[:2] if self.quant == "int8" else quantize4(w)
        qx, sx, ties = quantize(x)
        self.near_ties += int(ties.sum())
        rows = np.nonzero(ties)[0]
        if rows.size:
            at = self.start + int(rows[0])
            self.first_tie = at if self.first_tie is None else min(self.first_tie, at)
        if self.quant == "int4":
            # (q, d) or (q, d, order): weight input j of q is activation order[j]
            q, d = self.qw[name][:2]
            if len(self.qw[name]) == 3:
                qx = qx[:, self.qw[name][2]]
            xp = np.zeros((qx.shape[0], q.shape[1] * 32))
            xp[:, :qx.shape[1]] = qx
            s = np.einsum("ngk,ogk->nog", xp.reshape(qx.shape[0], -1, 32), q)
            return (s * d[None]).sum(axis=-1) * sx[:, None] + b
        qw, sw = self.qw[name]
        return (qx @ qw.T) * sx[:, None] * sw[None, :] + b

    def norm(self, x, name):
        return rms_norm(x, self.w[name], self.c.eps, self.c.gemma_norm)

    def reset(self):
        """Forget the cached sequence."""
        self.k = [np.zeros((self.c.kv_heads, 0, self.c.head_dim)) for _ in range(self.c.layers)]
        self.v = [np.zeros((self.c.kv_heads, 0, self.c.head_dim)) for _ in range(self.c.layers)]

    def attention(self, i, x, pos):
        """Causal GQA self-attention of layer i for the new rows x [n, hidden] at pos."""
        c, p = self.c, f"model.layers.{i}.self_attn."
        n = x.shape[0]
        heads = lambda t, h: t.reshape(n, h, c.head_dim).transpose(1, 0, 2)  # noqa: E731
        q = heads(self.linear(x, p + "q_proj.weight", c.bias_qkv), c.heads)
        k = heads(self.linear(x, p + "k_proj.weight", c.bias_qkv), c.kv_heads)
        v = heads(self.linear(x, p + "v_proj.weight", c.bias_qkv), c.kv_heads)
        if c.qk_norm:  # RMSNorm over each head's head_dim, before RoPE
            q = self.norm(q, p + "q_norm.weight")
            k = self.norm(k, p + "k_norm.weight")
        q, k = rope(q, pos, c.rope[i], c.rot), rope(k, pos, c.rope[i], c.rot)
        self.k[i] = np.concatenate([self.k[i], k], axis=1)
        self.v[i] = np.concatenate([self.v[i], v], axis=1)
        group = c.heads // c.kv_heads  # query head h reads kv head h // group
        kk = np.repeat(self.k[i], group, axis=0)
        vv = np.repeat(self.v[i], group, axis=0)
        s = softcap(q @ kk.transpose(0, 2, 1) * c.scale, c.attn_cap)  # [heads, n, t]
        kpos = np.arange(kk.shape[1])[None, :]
        ok = kpos <= pos[:, None]
        if c.window[i]:  # HF: key j is visible to query p when j > p - window
            ok &= kpos > pos[:, None] - c.window[i]
        s = np.where(ok, s, -np.inf)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        o = (s / s.sum(axis=-1, keepdims=True)) @ vv  # [heads, n, head_dim]
        return self.linear(o.transpose(1, 0, 2).reshape(n, c.heads * c.head_dim), p + "o_proj.weight",
                           c.bias_o)

    def mlp(self, i, x):
        """Gated MLP of layer i: down(act(gate(x)) * up(x)), act SiLU or GELU-tanh."""
        p = f"model.layers.{i}.mlp."
        g = self.linear(x, p + "gate_proj.weight")
        u = self.linear(x, p + "up_proj.weight")
        act = silu(g) if self.c.act == "silu" else gelu_tanh(g)
        return self.linear(act * u, p + "down_proj.weight")

    def forward(self, tokens):
        """Logits [n, vocab] for tokens appended to the cached sequence."""
        c = self.c
        start = self.start = self.k[0].shape[1]
        pos = np.arange(start, start + len(tokens))
        x = self.w["model.embed_tokens.weight"][np.asarray(tokens, dtype=np.int64)] * self.escale
        for i in range(c.layers):
            p = f"model.layers.{i}."
            if c.sandwich:  # Gemma: norms before and after each sublayer
                x = x + self.norm(self.attention(i, self.norm(x, p + "input_layernorm.weight"), pos),
                                  p + "post_attention_layernorm.weight")
                x = x + self.norm(self.mlp(i, self.norm(x, p + "pre_feedforward_layernorm.weight")),
                                  p + "post_feedforward_layernorm.weight")
            else:
                x = x + self.attention(i, self.norm(x, p + "input_layernorm.weight"), pos)
                x = x + self.mlp(i, self.norm(x, p + "post_attention_layernorm.weight"))
        self.hidden = self.norm(x, "model.norm.weight")  # what a speculator reads
        return softcap(self.hidden @ self.lm_head.T, c.logit_cap)


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
    ap.add_argument("--quantization", choices=["none", "int8", "int4"], default="none",
                    help="int8 / int4: the layers' matrices as inferd's W8A8 / W4A8")
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
        if a.quantization in ("int8", "int4") and not a.generate:
            print(json.dumps({"near_ties": model.near_ties, "first_tie": model.first_tie}))
    if a.hidden:
        np.save(a.hidden, model.prompt_hidden)
    if a.generate:
        print(json.dumps({"prompt_ids": prompt_ids, "ids": ids,
                          "text": continuation_text(sp, prompt_ids, ids) if sp else None,
                          "min_margin": margin, "first_tie": model.first_tie}))


if __name__ == "__main__":
    main()
