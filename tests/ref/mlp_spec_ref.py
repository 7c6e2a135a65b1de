#!/usr/bin/python3
"""The MLP speculator (vLLM's MLPSpeculator, IBM's accelerators) in float64
numpy, written from its equations (issue 21, vLLM's mlp_speculator.py), and a
maker of random speculators in the real checkpoint format.

  mlp_spec_ref.py make OUT --vocab V --emb-dim D [--inner-dim I] [--n-predict N]
                  [--tie] [--scale-input] [--no-prefix] [--seed S]
  mlp_spec_ref.py run DIR --hidden FILE.f32 --token T --k K --out LOGITS.npy

Equations: sw = 0.5 ** (0.5 / n_predict); ew = sqrt((1 - sw**2) * inner / 2).
With scale_input the hidden state h is RMS-normalized (eps 1e-6, no weight)
and divided by sqrt(2). Stage i, last token t: s = proj_i(s) * sw +
emb_i[t] * ew; s = gelu(rmsnorm(s) * ln_i.weight + ln_i.bias) (erf GELU);
logits = head_i(s); t = argmax (lowest id on ties). tie_weights: every stage
uses emb/head/ln 0, and proj 0 then proj 1.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

EPS = 1e-6


def write_safetensors(path, tensors):
    """{name: float32 array} as one safetensors file."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        assert h["dtype"] == "F32", "the reference reads F32 checkpoints"
        out[name] = np.frombuffer(data[a:b], dtype="<f4").astype(np.float64).reshape(h["shape"])
    return out


def make(out, vocab, emb_dim, inner_dim, n_predict, tie, scale_input, prefix, seed):
    rng = np.random.default_rng(seed)
    inner = inner_dim or emb_dim
    p = "speculator." if prefix else ""
    t = {}
    n_sets, n_proj = (1, 2) if tie else (n_predict, n_predict)
    for i in range(n_sets):
        t[f"{p}emb.{i}.weight"] = rng.normal(0, 1.0, (vocab, inner))
        t[f"{p}head.{i}.weight"] = rng.normal(0, 1.0 / math.sqrt(inner), (vocab, inner))
        t[f"{p}ln.{i}.weight"] = rng.normal(1.0, 0.1, inner)
        t[f"{p}ln.{i}.bias"] = rng.normal(0, 0.1, inner)
    for i in range(n_proj):
        fan_in = emb_dim if i == 0 else inner
        t[f"{p}proj.{i}.weight"] = rng.normal(0, 1.0 / math.sqrt(fan_in), (inner, fan_in))
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    cfg = {"architectures": ["MLPSpeculatorPreTrainedModel"], "model_type": "mlp_speculator",
           "vocab_size": vocab, "emb_dim": emb_dim, "inner_dim": inner_dim, "n_predict": n_predict,
           "top_k_tokens_per_head": [1] * n_predict, "n_candidates": 1, "tie_weights": tie,
           "scale_input": scale_input}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


def rmsnorm(x):
    return x / np.sqrt(np.mean(x * x) + EPS)


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def run(d, hidden, token, k):
    """Per-stage logits [k, vocab] and greedy tokens."""
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    w = read_safetensors(os.path.join(d, "model.safetensors"))
    w = {n[len("speculator."):] if n.startswith("speculator.") else n: a for n, a in w.items()}
    n_predict, tie = c["n_predict"], c.get("tie_weights", False)
    inner = c.get("inner_dim") or c["emb_dim"]
    sw = 0.5 ** (0.5 / n_predict)
    ew = math.sqrt((1 - sw * sw) * inner / 2)
    s = np.asarray(hidden, dtype=np.float64)
    if c.get("scale_input"):
        s = rmsnorm(s) / math.sqrt(2.0)
    logits, toks = [], []
    for i in range(k):
        e = 0 if tie else i
        pj = (0 if i == 0 else 1) if tie else i
        s = w[f"proj.{pj}.weight"] @ s * sw + w[f"emb.{e}.weight"][token] * ew
        s = gelu(rmsnorm(s) * w[f"ln.{e}.weight"] + w[f"ln.{e}.bias"])
        lg = w[f"head.{e}.weight"] @ s
        token = int(np.argmax(lg))
        logits.append(lg)
        toks.append(token)
    return np.array(logits), toks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--vocab", type=int, required=True)
    m.add_argument("--emb-dim", type=int, required=True)
    m.add_argument("--inner-dim", type=int, default=0)
    m.add_argument("--n-predict", type=int, default=3)
    m.add_argument("--tie", action="store_true")
    m.add_argument("--scale-input", action="store_true")
    m.add_argument("--no-prefix", action="store_true")
    m.add_argument("--seed", type=int, default=1)
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--hidden", required=True)
    r.add_argument("--token", type=int, required=True)
    r.add_argument("--k", type=int, required=True)
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "make":
        make(a.out, a.vocab, a.emb_dim, a.inner_dim, a.n_predict, a.tie, a.scale_input,
             not a.no_prefix, a.seed)
    else:
        h = np.fromfile(a.hidden, dtype="<f4")
        lg, toks = run(a.dir, h, a.token, a.k)
        np.save(a.out, lg)
        print(json.dumps({"tokens": toks}))


if __name__ == "__main__":
    sys.exit(main())
