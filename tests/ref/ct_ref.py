#!/usr/bin/python3
"""compressed-tensors W8A8 int8 checkpoints, written from the format's
description (llm-compressor's W8A8 scheme as vLLM loads it), not from
inferd's code.

Writing (what llm-compressor's QuantizationModifier does with scheme W8A8
and a min-max observer, then saves with format int-quantized):

  weights, strategy channel: per output row n, amax = max |w[n]|,
      scale[n] = amax / 127.5 (symmetric: the range 127 - (-128) halved),
      q = clamp(round_half_even(w / scale), -128, 127) stored I8 [N, K];
      weight_scale [N, 1] in the scale dtype (the model's, bf16 usually).
      The row's most negative value lands on -128 when it is the largest
      in magnitude. strategy tensor: one amax over the matrix, one scale.
  input activations, strategy token, dynamic: nothing stored; at run time
      each token x is quantized with s = amax(|x|) / 127,
      qx = clamp(round(x / s), -128, 127) (vLLM's dynamic per-token int8).
  y = (qx . q[n]) * s * scale[n] (+ bias, kept in float).

Reference: llama_ref.Llama with its linears replaced by the above.

  ct_ref.py SRC OUT [--scale-dtype bf16|f16|f32] [--strategy channel|tensor]
    writes SRC (a plain f32/bf16 checkpoint) as a W8A8 checkpoint at OUT.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_ref  # noqa: E402

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj",
           "down_proj", "gate_up_proj")


def is_linear(name):
    parts = name.split(".")
    return len(parts) > 3 and parts[1] == "layers" and parts[-1] == "weight" and parts[-2] in LINEARS


def to_dtype(a, dt):
    """float64 a rounded to dt ("f32", "f16", "bf16"): (raw array, exact float64 values)."""
    if dt == "f32":
        r = a.astype(np.float32)
        return r, r.astype(np.float64)
    if dt == "f16":
        r = a.astype(np.float16)
        return r, r.astype(np.float64)
    f = a.astype(np.float32).view(np.uint32)
    r = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return r, (r.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def quantize_weight(w, strategy, scale_dtype):
    """w [N, K] float64: (q int8 [N, K], raw scales, exact scales [N] float64)."""
    amax = np.abs(w).max(axis=1, keepdims=True) if strategy == "channel" else np.abs(w).max(keepdims=True)
    raw, s = to_dtype(amax / 127.5, scale_dtype)
    s = np.where(s == 0, 1, s)  # an all-zero row: q = 0 whatever the scale
    q = np.clip(np.rint(w / s), -128, 127).astype(np.int8)
    exact = np.broadcast_to(s, (w.shape[0], 1))[:, 0].astype(np.float64)
    return q, raw.reshape((w.shape[0], 1) if strategy == "channel" else (1,)), exact


def scheme(fmt="int-quantized", strategy="channel", ignore=("lm_head",)):
    """The quantization_config llm-compressor writes for W8A8 int8."""
    return {
        "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
        "global_compression_ratio": None, "kv_cache_scheme": None, "sparsity_config": {},
        "ignore": list(ignore),
        "config_groups": {"group_0": {
            "targets": ["Linear"], "output_activations": None,
            "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": strategy,
                        "dynamic": False, "group_size": None, "block_structure": None,
                        "actorder": None, "observer": "minmax", "observer_kwargs": {}},
            "input_activations": {"num_bits": 8, "type": "int", "symmetric": True,
                                  "strategy": "token", "dynamic": True, "group_size": None,
                                  "block_structure": None, "actorder": None, "observer": None,
                                  "observer_kwargs": {}}}},
    }


ST_DT = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("uint16"): "BF16",
         np.dtype("int8"): "I8", np.dtype("int32"): "I32"}


def write_st(path, tensors):
    """{name: array}; uint16 arrays are written as BF16."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": ST_DT[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def read_raw(path):
    """{name: array} of one safetensors file in its stored dtypes (BF16 as uint16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    np_dt = {v: k for k, v in ST_DT.items()}
    out = {}
    for name, h in header.items():
        if name != "__metadata__":
            b, e = h["data_offsets"]
            out[name] = np.frombuffer(data[b:e], np_dt[h["dtype"]].newbyteorder("<")).reshape(h["shape"])
    return out


def make(src, out, strategy="channel", scale_dtype="bf16", fmt="int-quantized"):
    """src as a W8A8 checkpoint at out; returns ({name: array written}, the count of -128s)."""
    w = llama_ref.load_weights(src)
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(src):
        if not f.endswith(".safetensors") and not f.endswith(".index.json"):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
    t, lows = {}, 0
    for name, v in w.items():
        if not is_linear(name):
            t[name] = v.astype(np.float32)
            continue
        q, raw, _ = quantize_weight(v, strategy, scale_dtype)
        lows += int((q == -128).sum())
        t[name] = q
        t[name + "_scale"] = raw
    write_st(os.path.join(out, "model.safetensors"), t)
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = scheme(fmt, strategy)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return t, lows


def quantize_tokens(x):
    """Rows of x (float64) as vLLM's dynamic per-token int8: (qx, s, near),
    near: per row how many values x / s fell within 2e-5 of a rounding
    boundary (where a float32 engine may round one step the other way)."""
    amax = np.abs(x).max(axis=1)
    s = np.where(amax > 0, amax / 127, 1)
    t = x / s[:, None]
    near = (np.abs(t - np.floor(t) - 0.5) < 2e-5).sum(axis=1)
    return np.clip(np.rint(t), -128, 127), np.where(amax > 0, s, 0), near


class W8A8(llama_ref.Llama):
    """The decoder with each int8 linear computed as the scheme defines."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        self.near_ties, self.first_tie = 0, None

    def linear(self, x, name, bias=False):
        if name + "_scale" not in self.w:
            return super().linear(x, name, bias)
        b = self.w[name[:-len("weight")] + "bias"] if bias else 0.0
        q = self.w[name]
        s = self.w[name + "_scale"].reshape(-1)
        s = np.broadcast_to(s, (q.shape[0],))
        qx, sx, near = quantize_tokens(x)
        rows = np.nonzero(near)[0]
        self.near_ties += int(near.sum())
        if rows.size:
            at = self.start + int(rows[0])
            self.first_tie = at if self.first_tie is None else min(self.first_tie, at)
        return (qx @ q.T) * sx[:, None] * s[None, :] + b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--strategy", default="channel", choices=("channel", "tensor"))
    ap.add_argument("--scale-dtype", default="bf16", choices=("bf16", "f16", "f32"))
    a = ap.parse_args()
    make(a.src, a.out, a.strategy, a.scale_dtype)


if __name__ == "__main__":
    main()
