#!/usr/bin/python3
"""A one-layer Llama whose greedy output follows a given chain of token ids,
for end-to-end tests of output parsers with a real tokenizer:

  scripts/make_chain_model.py OUT --tokenizer DIR --chain 5,9,3,... [--eos 3]

After token chain[i] the model's next token is chain[i + 1] (a bigram table:
chain[0..n-1] must be distinct). Token chain[i]'s embedding is the unit
vector e_i; attention's and the MLP's output projections are zero, so the
last hidden state is e_i (normalised) and the untied lm_head row of
chain[i + 1] is 10 e_i: logit 10 for the successor, 0 elsewhere. A prompt
ending in chain[0] makes the model write chain[1:] and stop at an EOS id.
DIR's tokenizer.json and tokenizer_config.json are copied (its chat
template included); generation_config.json lists the --eos ids. bf16.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model import write_json, write_safetensors  # noqa: E402


def vocab_size(tokenizer_json):
    with open(tokenizer_json) as f:
        t = json.load(f)
    ids = list(t["model"]["vocab"].values()) + [a["id"] for a in t.get("added_tokens", [])]
    return max(ids) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--chain", required=True, help="comma-separated token ids")
    ap.add_argument("--eos", default="", help="comma-separated EOS ids")
    a = ap.parse_args()
    chain = [int(x) for x in a.chain.split(",")]
    eos = [int(x) for x in a.eos.split(",") if x]
    if len(set(chain[:-1])) != len(chain) - 1:
        sys.exit("make_chain_model: a token occurs twice before the chain's end: "
                 "its successor would be ambiguous")
    os.makedirs(a.out, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(a.tokenizer, f), os.path.join(a.out, f))
    v = vocab_size(os.path.join(a.out, "tokenizer.json"))
    if max(chain + eos) >= v:
        sys.exit("make_chain_model: a token id is outside the vocabulary (%d)" % v)
    d = (len(chain) + 7) // 8 * 8
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d,
         "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
         "num_key_value_heads": 1, "head_dim": d, "vocab_size": v,
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "hidden_act": "silu", "tie_word_embeddings": False,
         "bos_token_id": eos[0] if eos else 0, "eos_token_id": eos or [0],
         "torch_dtype": "bfloat16"}
    emb = np.zeros((v, d), np.float32)
    head = np.zeros((v, d), np.float32)
    for i, t in enumerate(chain[:-1]):
        emb[t, i] = 1.0
        head[chain[i + 1], i] = 10.0
    z = lambda r, k: np.zeros((r, k), np.float32)  # noqa: E731
    ones = np.ones(d, np.float32)
    p = "model.layers.0."
    tensors = [("model.embed_tokens.weight", emb),
               (p + "input_layernorm.weight", ones),
               (p + "self_attn.q_proj.weight", z(d, d)), (p + "self_attn.k_proj.weight", z(d, d)),
               (p + "self_attn.v_proj.weight", z(d, d)), (p + "self_attn.o_proj.weight", z(d, d)),
               (p + "post_attention_layernorm.weight", ones),
               (p + "mlp.gate_proj.weight", z(8, d)), (p + "mlp.up_proj.weight", z(8, d)),
               (p + "mlp.down_proj.weight", z(d, 8)),
               ("model.norm.weight", ones), ("lm_head.weight", head)]
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, "BF16")
    write_json(os.path.join(a.out, "config.json"), c)
    write_json(os.path.join(a.out, "generation_config.json"),
               {"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"]})


if __name__ == "__main__":
    main()
