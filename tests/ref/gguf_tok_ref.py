#!/usr/bin/python3
"""A tokenizer as GGUF metadata (llama.cpp's tokenizer.ggml.* keys), written
from the tokenizer's own files for the tests, as GGUF's documentation
describes the keys (no code from llama.cpp or inferd):

  * kvs_from_spm: a SentencePiece tokenizer.model -> tokenizer.ggml.model
    "llama": tokens, scores, token_type (the proto's piece types, which
    GGUF numbers the same: 1 normal, 2 unknown, 3 control, 4 user-defined,
    5 unused, 6 byte), special ids, add_space_prefix and
    remove_extra_whitespaces from the proto's normalizer_spec;
  * kvs_from_hf: a tokenizer.json (byte-level BPE) -> "gpt2": tokens by id
    ([PADn] for holes, type 5), merges as "a b", added tokens typed 3
    (special) or 4, tokenizer.ggml.pre as given;
  * both: bos/eos/pad ids and add_bos_token from tokenizer_config.json, its
    chat_template as tokenizer.chat_template.

The proto is read with a small protobuf decoder (wire format: varint keys,
field number << 3 | wire type), no protobuf package needed.
"""
import json
import os
import struct

V_U32, V_I32, V_F32, V_BOOL, V_STRING, V_ARRAY = 4, 5, 6, 7, 8, 9


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = _varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = b[i:i + 8], i + 8
        elif w == 5:
            v, i = b[i:i + 4], i + 4
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {w}")
        out.append((f, v))
    return out


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _config(d):
    p = os.path.join(d, "tokenizer_config.json")
    return json.load(open(p)) if os.path.exists(p) else {}


def _tok_str(v):
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _common(kvs, cfg, ids):
    """Special ids named by tokenizer_config.json, add_bos/eos, template."""
    for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("pad_token", "padding"),
                      ("unk_token", "unknown")):
        s = _tok_str(cfg.get(key))
        if s is not None and s in ids and not any(k == f"tokenizer.ggml.{name}_token_id" for k, _, _ in kvs):
            kvs.append((f"tokenizer.ggml.{name}_token_id", V_U32, ids[s]))
    for key in ("add_bos_token", "add_eos_token"):
        if isinstance(cfg.get(key), bool):
            kvs.append((f"tokenizer.ggml.{key}", V_BOOL, cfg[key]))
    if isinstance(cfg.get("chat_template"), str):
        kvs.append(("tokenizer.chat_template", V_STRING, cfg["chat_template"]))
    return kvs


def kvs_from_spm(d):
    top = _fields(open(os.path.join(d, "tokenizer.model"), "rb").read())
    tokens, scores, types = [], [], []
    for f, v in top:
        if f != 1:
            continue
        p = dict(_fields(v))
        tokens.append(p[1].decode("utf-8"))
        scores.append(struct.unpack("<f", p[2])[0] if 2 in p else 0.0)
        types.append(p.get(3, 1))
    trainer = dict(_fields(next(v for f, v in top if f == 2)))
    norm = dict(_fields(next((v for f, v in top if f == 3), b"")))
    kvs = [("tokenizer.ggml.model", V_STRING, "llama"),
           ("tokenizer.ggml.tokens", V_ARRAY, (V_STRING, tokens)),
           ("tokenizer.ggml.scores", V_ARRAY, (V_F32, scores)),
           ("tokenizer.ggml.token_type", V_ARRAY, (V_I32, types)),
           ("tokenizer.ggml.add_space_prefix", V_BOOL, bool(norm.get(3, 1))),
           ("tokenizer.ggml.remove_extra_whitespaces", V_BOOL, bool(norm.get(4, 1)))]
    # the proto's defaults: unk 0, bos 1, eos 2, pad -1
    for field, name, default in ((40, "unknown", 0), (41, "bos", 1), (42, "eos", 2), (43, "padding", -1)):
        v = _signed(trainer.get(field, default))
        if 0 <= v < len(tokens):
            kvs.append((f"tokenizer.ggml.{name}_token_id", V_U32, v))
    return _common(kvs, _config(d), {t: i for i, t in enumerate(tokens)})


def kvs_from_hf(d, pre):
    t = json.load(open(os.path.join(d, "tokenizer.json")))
    vocab = dict(t["model"]["vocab"])
    added = {a["id"]: a for a in t.get("added_tokens") or []}
    n = max(list(vocab.values()) + list(added)) + 1
    tokens, types = [f"[PAD{i}]" for i in range(n)], [5] * n
    for s, i in vocab.items():
        tokens[i], types[i] = s, 1
    for i, a in added.items():
        tokens[i], types[i] = a["content"], 3 if a.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in t["model"].get("merges", [])]
    kvs = [("tokenizer.ggml.model", V_STRING, "gpt2"),
           ("tokenizer.ggml.pre", V_STRING, pre),
           ("tokenizer.ggml.tokens", V_ARRAY, (V_STRING, tokens)),
           ("tokenizer.ggml.token_type", V_ARRAY, (V_I32, types)),
           ("tokenizer.ggml.merges", V_ARRAY, (V_STRING, merges))]
    cfg = dict(_config(d))
    if not isinstance(cfg.get("add_bos_token"), bool):
        # the post-processor's template: a special token before $A adds BOS
        pp = t.get("post_processor") or {}
        procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
        single = next((p.get("single") for p in procs if p.get("type") == "TemplateProcessing"), [])
        cfg["add_bos_token"] = bool(single) and "SpecialToken" in single[0]
    return _common(kvs, cfg, {s: i for i, s in enumerate(tokens)})
