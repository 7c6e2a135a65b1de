#!/usr/bin/python3
"""Make a Hugging Face decoder model directory: random tiny models for tests, or a relayout.

  make_model.py OUT [--family F] [--seed S] [--vocab 384] [--hidden 64] [--intermediate 160]
      [--layers 2] [--heads 4] [--kv-heads 2] [--head-dim N] [--max-pos 256]
      [--rope-theta 10000] [--eps 1e-5] [--dtype f32|f16|bf16] [--shards N]
      [--untied] [--tokenizer PATH | --no-tokenizer] [--set KEY=JSON ...] [--from SRC_DIR]
      [--stream]

--tokenizer takes a SentencePiece tokenizer.model, or a Hugging Face tokenizer.json
(the file or its directory; tokenizer_config.json beside it is copied too, and the
model's BOS/EOS ids are its bos_token/eos_token): a random model that carries a real
tokenizer (Llama 3's 128k vocabulary up to Gemma 3's 262k).

--no-tokenizer writes no tokenizer: the vocabulary is --vocab, any size (a
real-size checkpoint for the engine benchmark, which never tokenizes). --set
KEY=JSON overrides one config.json key after the family's (repeatable; null
removes a setting): real checkpoints' values, e.g. Gemma-3-1B's
--set sliding_window=512 --set sliding_window_pattern=6 --set rope_scaling=null.

--stream makes each projection matrix as it is written, a block of rows at a
time from its own random stream (uniform, with the same standard deviation):
a real-size checkpoint (Llama-3-8B's or Qwen3-8B's 16 GB for scripts/gpu-check)
in the time its bytes take to write, where the default draws every tensor in
memory first (about ten minutes an 8B model). The numbers differ from the
default's for the same seed; the shapes, names and scales do not.

--family (default llama) writes that family's config keys and tensor names as
Hugging Face does, with its settings switched on where a tiny model can show
them (FAMILIES below: rope-scaling variants, biases, QK-norm, Gemma's norms and
soft-caps, a sliding window shorter than the test prompts, Phi-3's fused tensors
and LongRoPE).

Why: tests must run on a fresh clone without ../shared, so they need real-format
models (config.json, safetensors single or sharded, SentencePiece tokenizer) made on
the spot, in every dtype and layout the loader accepts. With --from SRC_DIR the
config, tokenizer and weights of an existing model are rewritten in another dtype /
shard count / tied-ness, so real weights can exercise those code paths too
(the shape options are then not allowed: the shapes are SRC's).

Random weights are scaled so the residual stream stays O(1) through the layers and
the logits have a std of about 10: greedy top-1/top-2 margins are then far above
float32 rounding, so greedy outputs of a float32 engine and a float64 reference agree.
Everything is deterministic for a given seed. Needs only numpy and sentencepiece
(Debian's /usr/bin/python3).
"""
import argparse
import io
import json
import os
import shutil
import struct
import sys

import numpy as np

DTYPES = {"f32": ("F32", "float32"), "f16": ("F16", "float16"), "bf16": ("BF16", "bfloat16")}
SHAPE_OPTS = ("family", "seed", "vocab", "hidden", "intermediate", "layers", "heads", "kv_heads",
              "head_dim", "max_pos", "rope_theta", "eps", "tokenizer", "no_tokenizer", "set")
# Random models: logit std (wide enough that the top-2 gap over 100 greedy steps is
# rarely below 1e-3) and attention score std (sharp enough that attention depends on
# position, so greedy text varies instead of repeating one token).
LOGIT_STD = 10.0
SCORE_STD = 2.0
NORM_NOISE = 0.05
EXTRA_FILES = ("tokenizer.model", "tokenizer_config.json", "generation_config.json",
               "tokenizer.json", "special_tokens_map.json")


# ---------------------------------------------------------------- safetensors I/O

def bf16_bits(x):
    """Finite float32 array -> bfloat16 bit patterns (uint16), rounding to nearest even."""
    # in uint32: a finite pattern is at most 0xFF7FFFFF, so adding 0x8000 cannot wrap
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((b + (0x7FFF + ((b >> 16) & 1))) >> 16).astype(np.uint16)


def encode(x, dtype):
    """Tensor -> little-endian bytes in safetensors dtype `dtype` (F32, F16 or BF16)."""
    if dtype == "BF16":
        return bf16_bits(x).astype("<u2").tobytes()
    return np.ascontiguousarray(x, dtype={"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()


class Streamed:
    """A (rows, cols) matrix of std `std` made a block of rows at a time as it is
    written (--stream): uniform in [-a, a] with a = sqrt(3) * std, from a stream
    of its own (seed, index), so nothing of it is held in memory but one block."""
    ROWS_PER_BLOCK_ELEMS = 1 << 22

    def __init__(self, rows, cols, std, seed, index):
        self.shape, self.size = (rows, cols), rows * cols
        self.std, self.seed, self.index = std, seed, index

    def blocks(self):
        rows, cols = self.shape
        step = max(1, self.ROWS_PER_BLOCK_ELEMS // cols)
        rng = np.random.default_rng([self.seed, self.index])
        a = np.float32(np.sqrt(3.0) * self.std)
        for r in range(0, rows, step):
            n = min(step, rows - r)
            u = rng.random((n, cols), dtype=np.float32)
            yield (u * (2 * a) - a).astype(np.float32)


def write_tensor(f, t, dtype):
    """One tensor's bytes: an array at once, a Streamed matrix block by block."""
    if isinstance(t, Streamed):
        for b in t.blocks():
            f.write(encode(b, dtype))
    else:
        f.write(encode(t, dtype))


def write_safetensors(path, tensors, dtype):
    """Write {name: array} in one dtype: u64 header length, space-padded JSON header, data.

    Each tensor is encoded only as it is written, so a real-size model never holds
    a second copy of its weights in memory."""
    esize = 4 if dtype == "F32" else 2
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors:
        n = t.size * esize
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, t in tensors:
            write_tensor(f, t, dtype)
    return off


def read_safetensors(path):
    """Read a safetensors file -> {name: float32 array} (F32, F16 and BF16 accepted)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        raw = data[h["data_offsets"][0]:h["data_offsets"][1]]
        if h["dtype"] == "BF16":
            t = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            t = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[h["dtype"]]).astype(np.float32)
        out[name] = t.reshape(h["shape"])
    return out


def read_model_weights(d):
    """All tensors of model dir `d`, single file or sharded through the index."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values()))
             if os.path.exists(index) else ["model.safetensors"])
    out = {}
    for f in files:
        out.update(read_safetensors(os.path.join(d, f)))
    return out


def shard_bounds(sizes, n):
    """Split tensors (byte sizes, in order) into n contiguous non-empty groups of similar bytes."""
    if not 1 <= n <= len(sizes):
        sys.exit(f"make_model: --shards must be between 1 and {len(sizes)} (the tensor count)")
    cum = np.cumsum(sizes)
    bounds = [0]
    for k in range(1, n):
        i = int(np.searchsorted(cum, cum[-1] * k / n)) + 1
        bounds.append(min(max(i, bounds[-1] + 1), len(sizes) - (n - k)))
    return bounds + [len(sizes)]


def write_weights(out, tensors, dtype, shards):
    """Write tensors as model.safetensors, or as N shards plus model.safetensors.index.json.

    Weight files left in `out` by an earlier run are removed first, so a loader never
    sees two layouts at once.
    """
    for f in os.listdir(out):
        if f.endswith(".safetensors") or f == "model.safetensors.index.json":
            os.remove(os.path.join(out, f))
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, dtype)
        return ["model.safetensors"]
    esize = 4 if dtype == "F32" else 2
    b = shard_bounds([t.size * esize for _, t in tensors], shards)
    files, weight_map, total = [], {}, 0
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[b[k]:b[k + 1]]
        total += write_safetensors(os.path.join(out, name), part, dtype)
        weight_map.update({t: name for t, _ in part})
        files.append(name)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    return files + ["model.safetensors.index.json"]


# ---------------------------------------------------------------- tokenizer

WORDS = {
    "name": "Lily Tom Ben Mia Sam Anna Max Lucy Tim Sue Jack Emma Leo Zoe".split(),
    "adj": ("big small red blue green happy sad little old new shiny soft loud quiet "
            "funny brave kind tall tiny warm cold yellow").split(),
    "noun": ("dog cat ball tree house car bird fish boat book cake hat box toy girl boy "
             "mom dad friend garden park river sun moon star flower apple bear duck "
             "frog kite train").split(),
    "verb": ("saw found liked wanted made took gave had painted kicked hugged shared "
             "lost opened built chased").split(),
    "verb_i": "played ran jumped laughed smiled cried slept danced sang walked swam".split(),
    "place": "the park,the garden,the house,the forest,the river,school,the shop,the beach".split(","),
    "time": ("One day,Once upon a time,Later,In the morning,At night,After lunch,"
             "The next day,Every day").split(","),
    "feel": "happy sad scared excited tired proud surprised".split(),
}


def sentences(n, seed=0):
    """n varied English sentences from word lists (stories, dialogue, numbers, punctuation)."""
    rng = np.random.default_rng(seed)
    w = lambda k: WORDS[k][rng.integers(len(WORDS[k]))]  # noqa: E731
    forms = [
        lambda: f"{w('time')}, {w('name')} {w('verb')} a {w('adj')} {w('noun')} in {w('place')}.",
        lambda: f"{w('name')} and {w('name')} {w('verb_i')} near the {w('adj')} {w('noun')}.",
        lambda: f"\"Can I play with your {w('noun')}?\" asked {w('name')}.",
        lambda: f"{w('name')} was very {w('feel')}! The {w('noun')} was so {w('adj')}.",
        lambda: (f"There were {rng.integers(2, 100)} {w('noun')}s and "
                 f"{rng.integers(1, 10)} {w('adj')} {w('noun')}s."),
        lambda: f"Why did the {w('noun')} go to {w('place')}? Because it was {w('adj')}.",
        lambda: (f"At {rng.integers(1, 13)}:{rng.integers(0, 60):02d}, {w('name')} {w('verb_i')} "
                 f"(and {w('verb_i')}); it cost ${rng.integers(1, 500)}."),
        lambda: (f"{w('name')} said, \"I love my {w('adj')} {w('noun')}.\" "
                 f"{w('name')} {w('verb_i')} - yes, really."),
    ]
    return [forms[rng.integers(len(forms))]() for _ in range(n)]


def train_tokenizer(path, vocab):
    """Train a Llama-style SentencePiece BPE (byte fallback) on built-in text; return piece count."""
    import sentencepiece as spm
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences(600)), model_writer=buf, model_type="bpe",
            vocab_size=vocab, byte_fallback=True, character_coverage=1.0, split_digits=True,
            allow_whitespace_only_pieces=True, normalization_rule_name="identity",
            remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            num_threads=1, minloglevel=2)
    except RuntimeError as e:  # vocab below the 319 required pieces or above what the text gives
        sys.exit(f"make_model: tokenizer training failed: {str(e).splitlines()[-1]}")
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return spm.SentencePieceProcessor(model_proto=buf.getvalue()).get_piece_size()


def hf_tokenizer(src, out):
    """Copy a tokenizer.json (and the tokenizer_config.json beside it) from src (the file
    or its directory) into out; return (vocab size, bos id, eos id): the largest id of
    model.vocab and added_tokens plus one, and the ids of tokenizer_config's bos_token
    and eos_token (None where absent)."""
    d = src if os.path.isdir(src) else os.path.dirname(src)
    j = json.load(open(os.path.join(d, "tokenizer.json")))
    shutil.copyfile(os.path.join(d, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    cfg = {}
    if os.path.exists(os.path.join(d, "tokenizer_config.json")):
        shutil.copyfile(os.path.join(d, "tokenizer_config.json"), os.path.join(out, "tokenizer_config.json"))
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    ids = dict(j["model"]["vocab"])
    ids.update({a["content"]: a["id"] for a in j.get("added_tokens") or []})

    def tid(key):
        v = cfg.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        return ids.get(v) if isinstance(v, str) else None
    return max(ids.values()) + 1, tid("bos_token"), tid("eos_token")


def tokenizer_size(path):
    """Piece count of an existing SentencePiece model."""
    import sentencepiece as spm
    return spm.SentencePieceProcessor(model_file=path).get_piece_size()


# ---------------------------------------------------------------- random model

# Each family's config keys beyond the Llama ones (merged over make_config's).
# Windows are 8 positions: shorter than the test prompts plus their greedy tokens.
FAMILIES = {
    "llama": {},
    "llama3": {"rope_theta": 500000.0, "eos_token_id": [2, 3],
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}},
    "llama-linear": {"rope_scaling": {"type": "linear", "factor": 4.0}},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "sliding_window": 8},
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rope_theta": 1000000.0,
              "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1,
              "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 32,
              "rope_theta": 1000000.0, "use_sliding_window": False, "sliding_window": None},
    "gemma2": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
               "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu_pytorch_tanh",
               "query_pre_attn_scalar": 24, "attn_logit_softcapping": 5.0,
               "final_logit_softcapping": 15.0, "sliding_window": 8, "rms_norm_eps": 1e-6},
    "gemma3": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
               "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
               "attn_logit_softcapping": None, "final_logit_softcapping": None,
               "sliding_window": 8, "sliding_window_pattern": 2, "rope_theta": 1000000.0,
               "rope_local_base_freq": 10000.0, "rms_norm_eps": 1e-6,
               "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "partial_rotary_factor": 0.5,
             "original_max_position_embeddings": 16, "sliding_window": None},
}


def family_config(a, c):
    """c with a.family's keys; LongRoPE factors sized to the rotary dims."""
    c.update(FAMILIES[a.family])
    if a.family.startswith("gemma"):
        if a.family == "gemma3":
            c.pop("hidden_act", None)
    if a.family == "phi3":
        n = int(c["head_dim"] * c["partial_rotary_factor"]) // 2
        rng = np.random.default_rng(a.seed + 7)
        c["rope_scaling"] = {"type": "longrope",
                             "short_factor": [float(x) for x in 1.0 + rng.random(n)],
                             "long_factor": [float(x) for x in 1.0 + 8.0 * rng.random(n)]}
    return c


def make_config(a, vocab):
    """HF LlamaConfig dict for the requested shape."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": a.hidden, "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim or a.hidden // a.heads,
        "vocab_size": vocab, "max_position_embeddings": a.max_pos,
        "rms_norm_eps": a.eps, "rope_theta": a.rope_theta, "hidden_act": "silu",
        "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02,
        "tie_word_embeddings": not a.untied, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": DTYPES[a.dtype][1],
    }


def family_weights(c, family, seed, tensors):
    """The Llama-named random tensors reshaped to the family's names: biases,
    QK-norm gains, Gemma's four norms per layer (gains as offsets from 1),
    Phi-3's fused tensors."""
    rng = np.random.default_rng(seed + 1000)
    w = dict(tensors)
    gemma = family.startswith("gemma")
    d, hd = c["hidden_size"], c["head_dim"]

    def gain(n, scale=1.0):
        g = scale * (1.0 + NORM_NOISE * rng.standard_normal(n))
        return (g - 1.0 if gemma else g).astype(np.float32)
    if gemma:  # stored gains are w with the norm computing x * (1 + w)
        for k in list(w):
            if k.endswith("layernorm.weight") or k == "model.norm.weight":
                w[k] = (w[k] - 1.0).astype(np.float32)
    out = []
    for name, t in tensors:
        if not name.startswith("model.layers."):
            out.append((name, w[name]))
            continue
        p = name[:name.index(".", len("model.layers.")) + 1]
        suffix = name[len(p):]
        if family == "phi3" and suffix in ("self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                           "mlp.up_proj.weight"):
            continue
        if family == "phi3" and suffix == "self_attn.q_proj.weight":
            qkv = np.concatenate([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                                  w[p + "self_attn.v_proj.weight"]])
            out.append((p + "self_attn.qkv_proj.weight", qkv))
            continue
        if family == "phi3" and suffix == "mlp.gate_proj.weight":
            out.append((p + "mlp.gate_up_proj.weight",
                        np.concatenate([w[name], w[p + "mlp.up_proj.weight"]])))
            continue
        out.append((name, w[name]))
        if suffix in ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                      "self_attn.v_proj.weight") and family == "qwen2":
            out.append((name[:-len("weight")] + "bias",
                        (0.3 * rng.standard_normal(t.shape[0])).astype(np.float32)))
        if suffix == "self_attn.k_proj.weight" and family in ("qwen3", "gemma3"):
            out.append((p + "self_attn.q_norm.weight", gain(hd, np.sqrt(SCORE_STD))))
            out.append((p + "self_attn.k_norm.weight", gain(hd, np.sqrt(SCORE_STD))))
        if suffix == "post_attention_layernorm.weight" and gemma:
            out.append((p + "pre_feedforward_layernorm.weight", gain(d)))
            out.append((p + "post_feedforward_layernorm.weight", gain(d)))
    return out


def random_weights(c, seed, stream=False):
    """Random Llama weights as [(name, float32 array)] in HF names and [out, in] layout.

    Projections have std 1/sqrt(fan_in), so every sublayer returns O(1) activations;
    q and k are sqrt(SCORE_STD) larger, giving attention scores of std SCORE_STD.
    Embeddings are small (std 1/sqrt(hidden), unit-norm rows) so a tied lm_head does not
    just favour repeating the current token; the final norm's gain sets the logit std
    to about LOGIT_STD, giving clear greedy margins. With stream, the matrices are
    Streamed (made as they are written) with the same standard deviations.
    """
    rng = np.random.default_rng(seed)
    d, inter, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    made = [0]

    def mat(rows, cols, gain=1.0):
        if stream:
            made[0] += 1
            return Streamed(rows, cols, gain / np.sqrt(cols), seed, made[0])
        return (gain * rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def norm(gain=1.0):
        return (gain * (1.0 + NORM_NOISE * rng.standard_normal(d))).astype(np.float32)

    out = [("model.embed_tokens.weight", mat(v, d))]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", norm()),
                (p + "self_attn.q_proj.weight", mat(nh * hd, d, np.sqrt(SCORE_STD))),
                (p + "self_attn.k_proj.weight", mat(nkv * hd, d, np.sqrt(SCORE_STD))),
                (p + "self_attn.v_proj.weight", mat(nkv * hd, d)),
                (p + "self_attn.o_proj.weight", mat(d, nh * hd)),
                (p + "post_attention_layernorm.weight", norm()),
                (p + "mlp.gate_proj.weight", mat(inter, d)),
                (p + "mlp.up_proj.weight", mat(inter, d)),
                (p + "mlp.down_proj.weight", mat(d, inter))]
    out.append(("model.norm.weight", norm(LOGIT_STD)))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", mat(v, d)))
    return out


def write_json(path, obj):
    """Pretty JSON with a trailing newline."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_side_files(out, c, name):
    """generation_config.json and tokenizer_config.json for a fresh model."""
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"]})
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "model_max_length": c["max_position_embeddings"], "name_or_path": name})


def make_random(a):
    """Fresh random model in a.out; returns (config, tensors)."""
    if a.hidden % a.heads and not a.head_dim:
        sys.exit("make_model: --hidden must be a multiple of --heads (or give --head-dim)")
    if a.heads % a.kv_heads:
        sys.exit("make_model: --heads must be a multiple of --kv-heads")
    tok = os.path.join(a.out, "tokenizer.model")
    hf = a.tokenizer and (os.path.isdir(a.tokenizer) or a.tokenizer.endswith(".json"))
    if hf:
        vocab, bos, eos = hf_tokenizer(a.tokenizer, a.out)
    elif a.tokenizer:
        shutil.copyfile(a.tokenizer, tok)
        vocab = tokenizer_size(tok)
    elif a.no_tokenizer:
        vocab = a.vocab
    else:
        vocab = train_tokenizer(tok, a.vocab)
    c = family_config(a, make_config(a, vocab))
    for k, v in a.set:
        if v is None:
            c.pop(k, None)
        else:
            c[k] = v
    if hf:  # the tokenizer's own special ids and tokenizer_config.json
        c.update({"bos_token_id": bos, "eos_token_id": eos})
        write_json(os.path.join(a.out, "generation_config.json"),
                   {"bos_token_id": bos, "eos_token_id": eos})
    else:
        write_side_files(a.out, c, os.path.basename(os.path.abspath(a.out)))
    return c, family_weights(c, a.family, a.seed, random_weights(c, a.seed, a.stream))


def relayout(a):
    """Config, side files and weights of a.src, untied on request; returns (config, tensors).

    A tied source's lm_head is its embedding (as in HF, whatever else the files hold),
    so untying copies the embedding; an untied source keeps its lm_head.
    """
    c = json.load(open(os.path.join(a.src, "config.json")))
    w = read_model_weights(a.src)
    tied = c.get("tie_word_embeddings", False)
    if tied:
        w.pop("lm_head.weight", None)
        if a.untied:
            w["lm_head.weight"] = w["model.embed_tokens.weight"].copy()
            tied = False
    c.update({"tie_word_embeddings": tied, "torch_dtype": DTYPES[a.dtype][1]})
    for f in EXTRA_FILES:
        if os.path.exists(os.path.join(a.src, f)):
            shutil.copyfile(os.path.join(a.src, f), os.path.join(a.out, f))
    return c, sorted(w.items(), key=lambda kv: tensor_order(kv[0]))


def tensor_order(name):
    """Sort key: embeddings, layers in numeric order, final norm, lm_head."""
    if name.startswith("model.layers."):
        parts = name.split(".")
        return (1, int(parts[2]), ".".join(parts[3:]))
    return ({"model.embed_tokens.weight": 0, "model.norm.weight": 2}.get(name, 3), 0, name)


def config_override(text):
    """KEY=JSON -> (key, value); a bare word that is not JSON is taken as a string."""
    key, sep, val = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=JSON")
    try:
        return key, json.loads(val)
    except ValueError:
        return key, val


def parse_args():
    """Command line; shape options are refused together with --from."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--family", default="llama", choices=sorted(FAMILIES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=384)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=160)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=0, help="default hidden/heads")
    ap.add_argument("--max-pos", type=int, default=256)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--untied", action="store_true", help="separate lm_head.weight")
    ap.add_argument("--tokenizer", help="copy this tokenizer.model, or this tokenizer.json (a file "
                    "or its directory, with the tokenizer_config.json beside it), instead of "
                    "training one; the vocabulary size is the tokenizer's")
    ap.add_argument("--no-tokenizer", action="store_true",
                    help="write no tokenizer; the vocabulary is --vocab (any size)")
    ap.add_argument("--set", action="append", default=[], type=config_override, metavar="KEY=JSON",
                    help="override a config.json key after the family's (null removes it)")
    ap.add_argument("--from", dest="src", metavar="SRC_DIR", help="relayout an existing model")
    ap.add_argument("--stream", action="store_true",
                    help="make each matrix as it is written (real-size checkpoints; other numbers)")
    a = ap.parse_args()
    if a.stream and (a.src or a.family == "phi3"):
        ap.error("--stream makes a fresh model of a family without fused tensors (not --from, "
                 "not phi3)")
    if a.tokenizer and a.no_tokenizer:
        ap.error("--tokenizer and --no-tokenizer exclude each other")
    if a.src and any(getattr(a, k) != ap.get_default(k) for k in SHAPE_OPTS):
        ap.error("--from takes the model from SRC_DIR; only --dtype, --shards and --untied apply")
    if a.src and os.path.realpath(a.src) == os.path.realpath(a.out):
        ap.error("--from SRC_DIR must differ from OUT")
    return a


def main():
    a = parse_args()
    os.makedirs(a.out, exist_ok=True)
    c, tensors = relayout(a) if a.src else make_random(a)
    st = DTYPES[a.dtype][0]
    files = write_weights(a.out, tensors, st, a.shards)
    write_json(os.path.join(a.out, "config.json"), c)
    params = sum(t.size for _, t in tensors)
    print(f"make_model: wrote {a.out}: {params} params, {st}, "
          f"{'tied' if c['tie_word_embeddings'] else 'untied'}, vocab {c['vocab_size']}, "
          f"files: config.json {' '.join(files)}")


if __name__ == "__main__":
    main()
