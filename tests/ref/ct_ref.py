#!/usr/bin/python3
"""compressed-tensors W8A8 int8 and FP8 checkpoints, written from the
format's description (llm-compressor's W8A8, FP8 and FP8-dynamic schemes as
vLLM loads them), not from inferd's code.

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
  input activations, strategy tensor, static: P.input_scale [1] per linear
      (calibrated: amax of the linear's inputs over calibration tokens /
      127.5), qx = clamp(round_half_even(x / s), -128, 127) with s that
      scale; linears that vLLM fuses on one input (q, k, v; gate, up) use
      the largest of their scales.
  y = (qx . q[n]) * s * scale[n] (+ bias, kept in float).

Reference: llama_ref.Llama with its linears replaced by the above.

FP8 (make_fp8; format float-quantized, what llm-compressor's FP8 schemes
save): weights are OCP FP8 E4M3 ("fn": 1 sign bit, 4 exponent bits of bias
7, 3 mantissa bits, exponent 0 subnormal m/8 * 2^-6, no infinities,
S.1111.111 NaN), stored F8_E4M3 [N, K]; per output row (channel) or per
matrix (tensor) scale = amax / 448 (E4M3's largest value) in the scale
dtype, q = the E4M3 code nearest w / scale (ties to the even mantissa, as a
float8_e4m3fn cast). W[n][k] = f32(e4m3(q)) * f32(scale[n]), one f32
multiply. Activations: FP8-dynamic (per token, nothing stored), FP8 static
(per tensor, an input_scale [1] per linear) or none (weight-only). The
reference for inferd's FP8 (which dequantizes at load and leaves
activations unquantized) is llama_ref on those dequantized f32 weights,
also written as a plain f32 checkpoint.

pack-quantized (make_pack; llm-compressor's W4A16, W4A16_ASYM and W8A16
schemes, as compressed-tensors' PackedQuantizationCompressor saves them):
integer weights of b = 4 or 8 bits, q in [-2^(b-1), 2^(b-1) - 1], with a
scale per output row (strategy channel) or per row and group of group_size
inputs (strategy group; the group of input k is k / group_size, or
weight_g_idx[k] with actorder group, a permutation's position // group_size
as GPTQ's activation ordering leaves it). Min-max observer: symmetric scale
= amax / ((2^b - 1) / 2), zero point 0, q = clamp(round(w / scale));
asymmetric scale = (max(w, 0) - min(w, 0)) / (2^b - 1), zero = clamp(-2^(b-1)
- round(min / scale)), q = clamp(round(w / scale) + zero). Stored:

  P.weight_packed I32 [N, ceil(K / (32/b))]: q + 2^(b-1) (unsigned), 32/b
      per int32 along the inputs, input k in bits b*(k % (32/b)) of word
      k / (32/b), the last word zero-padded;
  P.weight_shape I64 [2] = [N, K];
  P.weight_scale [N, G] (G = K / group_size, or 1) in the scale dtype;
  P.weight_zero_point (asymmetric only) I32 [ceil(N / (32/b)), G]: zero +
      2^(b-1) packed the same way along the rows (compressed-tensors 0.9.4
      on), or I8 [N, G] unpacked (earlier versions);
  P.weight_g_idx I32 [K] (actorder group).

W[n][k] = f32(scale[n][g]) * f32(q - zero[n][g]), one f32 multiply (exact
for bf16 and f16 scales); the reference is llama_ref on those weights, also
written as a plain f32 checkpoint.

  ct_ref.py SRC OUT [--scale-dtype bf16|f16|f32] [--strategy channel|tensor] [--static]
    writes SRC (a plain f32/bf16 checkpoint) as a W8A8 checkpoint at OUT.
  ct_ref.py SRC OUT --fp8 [--acts dynamic|static|none] ...: as FP8.
  ct_ref.py SRC OUT --pack BITS [--group N] [--asym] [--actorder] ...: as
    pack-quantized (--group 0: strategy channel).
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


def scheme(fmt="int-quantized", strategy="channel", ignore=("lm_head",), acts="dynamic"):
    """The quantization_config llm-compressor writes for W8A8 int8 (acts
    static: per-tensor static input scales)."""
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
                                  "strategy": "token" if acts == "dynamic" else "tensor",
                                  "dynamic": acts == "dynamic", "group_size": None,
                                  "block_structure": None, "actorder": None, "observer": None,
                                  "observer_kwargs": {}}}},
    }


ST_DT = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("uint16"): "BF16",
         np.dtype("int8"): "I8", np.dtype("int32"): "I32", np.dtype("uint8"): "F8_E4M3",
         np.dtype("int64"): "I64"}


def write_st(path, tensors, dtypes=None):
    """{name: array}; uint16 arrays are written as BF16, uint8 ones as F8_E4M3
    unless dtypes {name: safetensors dtype} says otherwise."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        dt = (dtypes or {}).get(name, ST_DT[a.dtype])
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def read_raw(path):
    """{name: array} of one safetensors file in its stored dtypes (BF16 as uint16,
    F8_E4M3 and U8 as uint8)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    np_dt = {v: k for k, v in ST_DT.items()}
    np_dt["U8"] = np.dtype("uint8")
    out = {}
    for name, h in header.items():
        if name != "__metadata__":
            b, e = h["data_offsets"]
            out[name] = np.frombuffer(data[b:e], np_dt[h["dtype"]].newbyteorder("<")).reshape(h["shape"])
    return out


# Linears vLLM fuses on one input, by the leaf name of any of them.
FUSED = {leaf: grp for grp in (("q_proj", "k_proj", "v_proj", "qkv_proj"),
                               ("gate_proj", "up_proj", "gate_up_proj")) for leaf in grp}
CALIB = [2, 19, 33, 5, 8, 41, 13, 3, 27, 11, 6, 50]  # not check_ct's test tokens


class Calibrate(llama_ref.Llama):
    """The float decoder recording each linear's largest |input|."""

    def __init__(self, model_dir):
        super().__init__(model_dir)
        self.amax = {}

    def linear(self, x, name, bias=False):
        self.amax[name] = max(self.amax.get(name, 0.0), float(np.abs(x).max()))
        return super().linear(x, name, bias)


def copy_beside(src, dirs):
    """Each of dirs made, with src's files other than its weights."""
    for d in dirs:
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(src):
            if not f.endswith(".safetensors") and not f.endswith(".index.json"):
                shutil.copy(os.path.join(src, f), os.path.join(d, f))


def write_beside(src, out, t, qc):
    """out made afresh beside src (its other files copied): tensors t, and
    src's config.json with quantization_config qc."""
    shutil.rmtree(out, ignore_errors=True)
    copy_beside(src, (out,))
    write_st(os.path.join(out, "model.safetensors"), t)
    with open(os.path.join(out, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = qc
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f)


def begin_pair(src, out, w):
    """out and out + "-f32" made beside src (its other files copied): the
    tensors of each, t and deq, holding w's others (not linears) in f32."""
    copy_beside(src, (out, out + "-f32"))
    t = {name: v.astype(np.float32) for name, v in w.items() if not is_linear(name)}
    return t, dict(t)


def write_pair(src, out, t, deq, qc, dtypes=None):
    """t at out with src's config.json plus quantization_config qc, deq (the
    dequantized twin) at out + "-f32" with src's config.json as it is."""
    write_st(os.path.join(out, "model.safetensors"), t, dtypes)
    write_st(os.path.join(out + "-f32", "model.safetensors"), deq)
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    with open(os.path.join(out + "-f32", "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    c["quantization_config"] = qc
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)


def make(src, out, strategy="channel", scale_dtype="bf16", fmt="int-quantized", acts="dynamic",
         margin=1.0):
    """src as a W8A8 checkpoint at out; returns ({name: array written}, the count of -128s).
    acts static: an input_scale per linear, amax over CALIB * margin / 127.5."""
    w = llama_ref.load_weights(src)
    copy_beside(src, (out,))
    amax = {}
    if acts == "static":
        cal = Calibrate(src)
        llama_ref.generate(cal, CALIB, 0, False)
        amax = cal.amax
    t, lows = {}, 0
    for name, v in w.items():
        if not is_linear(name):
            t[name] = v.astype(np.float32)
            continue
        q, raw, _ = quantize_weight(v, strategy, scale_dtype)
        lows += int((q == -128).sum())
        t[name] = q
        t[name + "_scale"] = raw
        if acts == "static":
            base, leaf = name.rsplit(".", 2)[0], name.split(".")[-2]
            a = max(amax[f"{base}.{p}.weight"] for p in FUSED.get(leaf, (leaf,))
                    if f"{base}.{p}.weight" in amax)
            # k and up a little larger than their siblings (one input, so
            # observers agree in real files): the largest-of-fused rule counts
            a *= {"k_proj": 1.3, "up_proj": 1.2}.get(leaf, 1.0)
            t[name[:-len("weight")] + "input_scale"] = to_dtype(np.array([a * margin / 127.5]),
                                                               scale_dtype)[0]
    write_st(os.path.join(out, "model.safetensors"), t)
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    c["quantization_config"] = scheme(fmt, strategy, acts=acts)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    return t, lows


def e4m3_decode(codes):
    """E4M3 codes (any int array) as float64 from the definition; NaN for
    S.1111.111."""
    c = np.asarray(codes).astype(np.int64)
    e, m = (c >> 3) & 15, c & 7
    v = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7.0))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return np.where(c & 0x80, -v, v)


E4M3_POS = e4m3_decode(np.arange(127))  # codes 0x00-0x7E: 0 to 448, increasing
NAN_CODES = (0x7F, 0xFF)


def to_e4m3(t):
    """float64 t (already within +-448) as the nearest E4M3 codes, uint8."""
    a = np.abs(t)
    hi = np.clip(np.searchsorted(E4M3_POS, a), 1, 126)
    lo = hi - 1
    dl, dh = a - E4M3_POS[lo], E4M3_POS[hi] - a
    code = np.where((dh < dl) | ((dh == dl) & (hi % 2 == 0)), hi, lo)
    return (code | np.where(t < 0, 0x80, 0)).astype(np.uint8)


def scheme_fp8(strategy="channel", acts="dynamic", fmt="float-quantized"):
    """The quantization_config llm-compressor writes for FP8-dynamic
    (acts dynamic), FP8 (static) or FP8 weight-only (none)."""
    q = scheme(fmt, strategy)
    g = q["config_groups"]["group_0"]
    g["weights"].update(type="float")
    if acts == "none":
        g["input_activations"] = None
    else:
        g["input_activations"].update(type="float", strategy="token" if acts == "dynamic" else "tensor",
                                      dynamic=acts == "dynamic",
                                      observer=None if acts == "dynamic" else "minmax")
    return q


def dequant_fp8(q, scale):
    """f32 W = f32(e4m3(q)) * f32(scale[n]) (scale exact float64 [N])."""
    return e4m3_decode(q).astype(np.float32) * scale.astype(np.float32)[:, None]


def make_fp8(src, out, strategy="channel", scale_dtype="bf16", acts="dynamic",
             fmt="float-quantized", all_codes=False, seed=0):
    """src as an FP8 checkpoint at out and its dequantized weights as a plain
    f32 checkpoint at out + "-f32"; returns {name: array written}.
    all_codes: layer 0's q_proj holds every non-NaN code (254 of them, each
    about equally often, shuffled) instead of rounded weights."""
    w = llama_ref.load_weights(src)
    rng = np.random.default_rng(seed)
    t, deq = begin_pair(src, out, w)
    for name, v in w.items():
        if not is_linear(name):
            continue
        amax = np.abs(v).max(axis=1, keepdims=True) if strategy == "channel" else np.abs(v).max(keepdims=True)
        raw, s = to_dtype(amax / 448, scale_dtype)
        s = np.where(s == 0, 1, s)
        q = to_e4m3(np.clip(v / s, -448, 448))
        if all_codes and name == "model.layers.0.self_attn.q_proj.weight":
            ok = np.array([c for c in range(256) if c not in NAN_CODES], np.uint8)
            q = rng.permutation(np.resize(ok, q.size)).reshape(q.shape).astype(np.uint8)
        exact = np.broadcast_to(s, (v.shape[0], 1))[:, 0]
        t[name] = q
        t[name + "_scale"] = raw.reshape((v.shape[0], 1) if strategy == "channel" else (1,))
        if acts == "static":  # read by nobody in inferd (activations stay unquantized)
            t[name[:-len("weight")] + "input_scale"] = rng.uniform(0.01, 0.1, (1,)).astype(np.float32)
        deq[name] = dequant_fp8(q, exact)
    write_pair(src, out, t, deq, scheme_fp8(strategy, acts, fmt))
    return t


def make_fp8m(src, out, block=None, scale_dtype="f32", acts="dynamic"):
    """src as a quant_method fp8 checkpoint (vLLM's Fp8Config; DeepSeek-V3's
    and Qwen3's FP8 releases) at out, and its dequantized weights at out +
    "-f32". Written from that format's description: each linear P.weight
    is F8_E4M3 [N, K]; with weight_block_size [bn, bk] the scale of the
    block of rows n // bn and inputs k // bk is amax(|w| over the block) /
    448, stored as P.weight_scale_inv [ceil(N/bn), ceil(K/bk)] (the factor
    that multiplies the codes, despite the name); without it one scale per
    tensor, P.weight_scale. q = the E4M3 code nearest w / scale, W[n][k] =
    f32(e4m3(q)) * f32(scale of its block). acts static adds P.input_scale
    (read by nobody in inferd: activations stay unquantized)."""
    w = llama_ref.load_weights(src)
    rng = np.random.default_rng(7)
    t, deq = begin_pair(src, out, w)
    for name, v in w.items():
        if not is_linear(name):
            continue
        N, K = v.shape
        bn, bk = block if block else (N, K)
        nb, kb = -(-N // bn), -(-K // bk)
        amax = np.zeros((nb, kb))
        for i in range(nb):
            for j in range(kb):
                amax[i, j] = np.abs(v[i * bn:(i + 1) * bn, j * bk:(j + 1) * bk]).max()
        raw, s = to_dtype(amax / 448, scale_dtype)
        s = np.where(s == 0, 1, s)
        full = np.repeat(np.repeat(s, bn, 0), bk, 1)[:N, :K]  # each weight's block scale
        q = to_e4m3(np.clip(v / full, -448, 448))
        t[name] = q
        if block:
            t[name + "_scale_inv"] = raw
        else:
            t[name + "_scale"] = raw.reshape(())
        if acts == "static":
            t[name[:-len("weight")] + "input_scale"] = rng.uniform(0.01, 0.1, ()).astype(np.float32)
        deq[name] = e4m3_decode(q).astype(np.float32) * full.astype(np.float32)
    qc = {"quant_method": "fp8", "activation_scheme": acts, "fmt": "e4m3"}
    if block:
        qc["weight_block_size"] = list(block)
    write_pair(src, out, t, deq, qc)
    return t


def scheme_pack(bits=4, group=128, sym=True, actorder=False):
    """The quantization_config llm-compressor writes for W4A16 (group 128),
    W4A16_ASYM (sym False) and W8A16 (bits 8, group 0: channel)."""
    q = scheme("pack-quantized", "group" if group else "channel")
    g = q["config_groups"]["group_0"]
    g["weights"].update(num_bits=bits, symmetric=sym, group_size=group or None,
                        actorder="group" if actorder else None)
    g["input_activations"] = None
    return q


def pack_int32(u, bits, axis=1):
    """Unsigned b-bit values u (2-D) packed 32/b to an int32 along axis
    (1: along each row, 0: down each column), the first value in the low
    bits, the last word zero-padded."""
    per = 32 // bits
    u = np.asarray(u, np.uint64)
    if axis == 0:
        u = u.T
    u = np.pad(u, ((0, 0), (0, -u.shape[1] % per)))
    words = (u.reshape(u.shape[0], -1, per) << (bits * np.arange(per, dtype=np.uint64))).sum(axis=2)
    words = words.astype(np.uint32).view(np.int32)
    return np.ascontiguousarray(words.T if axis == 0 else words)


def quantize_pack(w, bits, gidx, n_groups, sym, scale_dtype):
    """w [N, K] float64 with input k in group gidx[k]: (q [N, K], zero [N, G]
    as signed ints, raw scales [N, G], exact scales [N, G] float64)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    N, K = w.shape
    mx = np.stack([w[:, gidx == g].max(axis=1) for g in range(n_groups)], axis=1)
    mn = np.stack([w[:, gidx == g].min(axis=1) for g in range(n_groups)], axis=1)
    if sym:
        raw, s = to_dtype(np.maximum(np.abs(mx), np.abs(mn)) / ((hi - lo) / 2), scale_dtype)
    else:
        mx, mn = np.maximum(mx, 0), np.minimum(mn, 0)
        raw, s = to_dtype((mx - mn) / (hi - lo), scale_dtype)
    s = np.where(s == 0, 1, s)
    zero = np.zeros(s.shape) if sym else np.clip(lo - np.rint(mn / s), lo, hi)
    q = np.clip(np.rint(w / s[:, gidx]) + zero[:, gidx], lo, hi)
    return q.astype(np.int64), zero.astype(np.int64), raw, s


def dequant_pack(q, zero, scale, gidx):
    """f32 W = f32(scale[n][g]) * f32(q - zero[n][g]), g = gidx[k]."""
    return scale.astype(np.float32)[:, gidx] * (q - zero[:, gidx]).astype(np.float32)


def make_pack(src, out, bits=4, group=32, sym=True, scale_dtype="bf16", actorder=False,
              zero_form="packed", all_codes=False, seed=0, ints=None):
    """src as a pack-quantized checkpoint at out (group 0: strategy channel;
    zero_form "packed" I32 or "i8" as compressed-tensors before 0.9.4) and
    its dequantized weights as a plain f32 checkpoint at out + "-f32";
    returns {name: array written}. actorder: each linear's groups follow a
    random permutation of its inputs (weight_g_idx). all_codes: layer 0's
    q_proj holds every code (and every zero point) about equally often,
    shuffled, instead of rounded weights. ints (a dict): filled with each
    linear's integers as check_hfq.w4a8_codes takes them: (q [N, K],
    zero [G, N], exact scale [G, N], group of each input)."""
    w = llama_ref.load_weights(src)
    rng = np.random.default_rng(seed)
    lo, hi, off = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, 1 << (bits - 1)
    t, deq = begin_pair(src, out, w)
    for name, v in w.items():
        if not is_linear(name):
            continue
        N, K = v.shape
        gs = group or K
        assert K % gs == 0, f"{name}: {K} inputs, group_size {gs}"
        G = K // gs
        gidx = np.arange(K) // gs
        if actorder:
            gidx = np.empty(K, np.int64)
            gidx[rng.permutation(K)] = np.arange(K) // gs
        q, zero, raw, s = quantize_pack(v, bits, gidx, G, sym, scale_dtype)
        if all_codes and name == "model.layers.0.self_attn.q_proj.weight":
            q = rng.permutation(np.resize(np.arange(lo, hi + 1), q.size)).reshape(q.shape)
            if not sym:
                zero = rng.permutation(np.resize(np.arange(lo, hi + 1), zero.size)).reshape(zero.shape)
        p = name[:-len("weight")]
        t[p + "weight_packed"] = pack_int32(q + off, bits)
        t[p + "weight_shape"] = np.array([N, K], np.int64)
        t[p + "weight_scale"] = raw
        if not sym:
            t[p + "weight_zero_point"] = (pack_int32(zero + off, bits, axis=0) if zero_form == "packed"
                                          else zero.astype(np.int8))
        if actorder:
            t[p + "weight_g_idx"] = gidx.astype(np.int32)
        deq[name] = dequant_pack(q, zero, s, gidx)
        if ints is not None:
            ints[name] = (q, zero.T, s.T, gidx)
    write_pair(src, out, t, deq, scheme_pack(bits, group, sym, actorder))
    return t


def quantize_tokens(x):
    """Rows of x (float64) as vLLM's dynamic per-token int8: (qx, s, near),
    near: per row how many values x / s fell within 2e-5 of a rounding
    boundary (where a float32 engine may round one step the other way)."""
    amax = np.abs(x).max(axis=1)
    s = np.where(amax > 0, amax / 127, 1)
    t = x / s[:, None]
    near = (np.abs(t - np.floor(t) - 0.5) < 2e-5).sum(axis=1)
    return np.clip(np.rint(t), -128, 127), np.where(amax > 0, s, 0), near


def quantize_static(x, s, lo=-128):
    """Rows of x (float64) with the static scale s: (qx, near) as
    quantize_tokens; lo: the clamp's low end (vLLM's -128; inferd's -127)."""
    t = x / s
    near = (np.abs(t - np.floor(t) - 0.5) < 2e-5).sum(axis=1)
    return np.clip(np.rint(t), lo, 127), near


class W8A8(llama_ref.Llama):
    """The decoder with each int8 linear computed as the scheme defines
    (static_lo: the low end of the static clamp)."""

    def __init__(self, model_dir, static_lo=-128):
        super().__init__(model_dir)
        self.near_ties, self.first_tie = 0, None
        self.static_lo, self.clamped_low = static_lo, 0

    def in_scale(self, name):
        """A static input scale for linear name: the largest of those fused on its input."""
        base, leaf = name.rsplit(".", 2)[0], name.split(".")[-2]
        v = [float(self.w[k].reshape(-1)[0]) for k in
             (f"{base}.{p}.input_scale" for p in FUSED.get(leaf, (leaf,))) if k in self.w]
        return max(v) if v else None

    def linear(self, x, name, bias=False):
        if name + "_scale" not in self.w:
            return super().linear(x, name, bias)
        b = self.w[name[:-len("weight")] + "bias"] if bias else 0.0
        q = self.w[name]
        s = self.w[name + "_scale"].reshape(-1)
        s = np.broadcast_to(s, (q.shape[0],))
        si = self.in_scale(name)
        if si is None:
            qx, sx, near = quantize_tokens(x)
        else:
            qx, near = quantize_static(x, si, self.static_lo)
            self.clamped_low += int((x / si < -127.5).sum())
            sx = np.full(x.shape[0], si)
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
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--acts", default="dynamic", choices=("dynamic", "static", "none"))
    ap.add_argument("--static", action="store_true", help="W8A8 with static input scales")
    ap.add_argument("--pack", type=int, choices=(4, 8))
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--asym", action="store_true")
    ap.add_argument("--actorder", action="store_true")
    a = ap.parse_args()
    if a.pack:
        make_pack(a.src, a.out, a.pack, a.group, not a.asym, a.scale_dtype, a.actorder)
    elif a.fp8:
        make_fp8(a.src, a.out, a.strategy, a.scale_dtype, a.acts)
    else:
        make(a.src, a.out, a.strategy, a.scale_dtype, acts="static" if a.static else "dynamic")


if __name__ == "__main__":
    main()
