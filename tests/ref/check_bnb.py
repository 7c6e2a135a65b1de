#!/usr/bin/python3
"""bitsandbytes 4-bit and 8-bit checkpoints (engine/hfq_bnb.c) against numpy.

A test model's layer linears are quantized and serialized the way
bitsandbytes' 4-bit layers save them (transformers' save_pretrained of a
load_in_4bit model), written here from the format's description, not from
inferd's code:

  quantize: the weight [N, K] flattened row-major, cut into blocks of
    `blocksize` (the last may be short); absmax[b] = max |w| of block b;
    each element w / absmax, clamped to [-1, 1], becomes the index of the
    nearest of the 16 values of the NF4 (or FP4) table; two indices a byte,
    the first in the high nibble (an odd count padded with a zero code).
  double quantization (bnb_4bit_use_double_quant): offset = mean(absmax);
    absmax - offset quantized blockwise (256 a block) against a 256-value
    signed table: nested_absmax[j] = max |.| of block j, and each absmax
    stored as the U8 index of the table value nearest (absmax - offset) /
    nested_absmax[j].
  stored, for P.weight: P.weight U8 [ceil(N*K/2), 1]; P.weight.absmax (F32
    [B], or U8 [B] double-quantized); P.weight.quant_map F32 [16];
    P.weight.nested_absmax F32, P.weight.nested_quant_map F32 [256]; and
    P.weight.quant_state.bitsandbytes__nf4 U8: the JSON of quant_type,
    blocksize, dtype, shape (and nested_blocksize, nested_dtype,
    nested_offset).
  dequantize (bitsandbytes' CUDA kernels): scale[b] = absmax[b], or
    nested_quant_map[absmax[b]] * nested_absmax[b // 256] + offset in f32;
    w = f32(quant_map[code]) * scale[block] in f32, rounded to dtype.

8-bit (load_in_8bit, LLM.int8), as bitsandbytes' Linear8bitLt saves it:
  quantize: per row, SCB[n] = max |w[n]|; q = round(w * 127 / SCB) in int8.
  stored, for P.weight: P.weight I8 [N, K]; P.SCB F32 [N]; P.weight_format
    U8 [] = 0 (the row layout).
  dequantize (bitsandbytes' int8_vectorwise_dequant): f32(q * SCB[n]),
    then times f32(1/127), each product rounded to f32.
  --quantization int8 gives the stored codes back (rows_as_stored).

Checks: logits bit-identical to a plain f32 checkpoint of the numpy-
dequantized weights on every kernel table, the same greedy tokens, and
--quantization int8 / int4 bit-identical to those on that plain checkpoint;
broken files and unsupported configurations refused by name.

  check_bnb.py --build build --fixtures build/fixtures
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_engine as ce  # noqa: E402
import check_hfq as hq  # noqa: E402  (logits, greedy, describes, refused)
import ct_ref  # noqa: E402  (is_linear, begin_pair, write_pair, write_st, read_raw)
import llama_ref  # noqa: E402

# NF4 (QLoRA, Dettmers et al. 2023, appendix E) and bitsandbytes' FP4 values.
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
       -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
       0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
       0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
FP4 = [0.0, 0.005208333333, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667, 0.25,
       0.0, -0.005208333333, -0.66666667, -1.0, -0.33333333, -0.5, -0.16666667, -0.25]
# A signed 256-value table for the nested absmax (the file carries its own).
NESTED = np.sort(np.concatenate([-(np.arange(1, 128) / 127.0) ** 2, [0.0],
                                 (np.arange(1, 129) / 128.0) ** 2])).astype(np.float32)


def nearest(x, table):
    """Index of the value of table nearest each x (the first on a tie)."""
    return np.abs(x[..., None] - table[None, :]).argmin(-1)


def to_dtype(v, dtype):
    """f32 v rounded to dtype ("bfloat16", "float16", "float32"), as f32."""
    if dtype == "float16":
        return v.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        u = v.astype(np.float32).view(np.uint32)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return v.astype(np.float32)


def quantize(w, qtype, blocksize, nested, dtype):
    """The stored parts of one linear {suffix: array} and its dequantized f32."""
    flat = w.astype(np.float32).reshape(-1)
    n = flat.size
    B = -(-n // blocksize)
    table = np.array(NF4 if qtype == "nf4" else FP4, np.float32)
    absmax = np.array([np.abs(flat[b * blocksize:(b + 1) * blocksize]).max() for b in range(B)],
                      np.float32)
    absmax = np.where(absmax == 0, np.float32(1), absmax)
    idx = nearest(np.clip(flat / np.repeat(absmax, blocksize)[:n], -1, 1), table).astype(np.uint8)
    if n % 2:
        idx = np.concatenate([idx, np.zeros(1, np.uint8)])
    parts = {"": (idx[0::2] << 4 | idx[1::2]).astype(np.uint8).reshape(-1, 1),
             ".quant_map": table}
    state = {"quant_type": qtype, "blocksize": blocksize, "dtype": dtype, "shape": list(w.shape)}
    if nested:
        offset = np.float32(absmax.mean())
        c = (absmax - offset).astype(np.float32)
        J = -(-B // 256)
        nabs = np.array([np.abs(c[j * 256:(j + 1) * 256]).max() for j in range(J)], np.float32)
        nabs = np.where(nabs == 0, np.float32(1), nabs)
        a8 = nearest(np.clip(c / np.repeat(nabs, 256)[:B], -1, 1), NESTED).astype(np.uint8)
        parts.update({".absmax": a8, ".nested_absmax": nabs, ".nested_quant_map": NESTED})
        state.update(nested_blocksize=256, nested_dtype="float32", nested_offset=float(offset))
        scale = (NESTED[a8] * np.repeat(nabs, 256)[:B]).astype(np.float32) + offset
    else:
        parts[".absmax"] = absmax
        scale = absmax
    raw = json.dumps(state).encode()
    parts[".quant_state.bitsandbytes__" + qtype] = np.frombuffer(raw, np.uint8).copy()
    deq = to_dtype((table[idx[:n]] * np.repeat(scale.astype(np.float32), blocksize)[:n]).astype(np.float32),
                   dtype)
    return parts, deq.reshape(w.shape)


def quantize8(w):
    """One linear's LLM.int8 parts {suffix of P: array} and its dequantized f32."""
    w = w.astype(np.float32)
    scb = np.abs(w).max(1).astype(np.float32)
    scb = np.where(scb == 0, np.float32(1), scb)
    q = np.clip(np.round(w * (np.float32(127) / scb[:, None])), -127, 127).astype(np.int8)
    deq = (q.astype(np.float32) * scb[:, None]).astype(np.float32) * np.float32(1 / 127)
    return {".weight": q, ".SCB": scb, ".weight_format": np.array(0, np.uint8)}, deq


def make8(src, out, skip=()):
    """src as a bitsandbytes 8-bit checkpoint at out (the linears named in
    skip kept as plain f32, as llm_int8_skip_modules leaves them) and its
    dequantized twin at out + "-f32"; returns the tensors written."""
    w = llama_ref.load_weights(src)
    t, deq = ct_ref.begin_pair(src, out, w)
    for name, v in w.items():
        if not ct_ref.is_linear(name):
            continue
        if name in skip:
            t[name] = deq[name] = v.astype(np.float32)
            continue
        parts, d = quantize8(v)
        for suffix, a in parts.items():
            t[name[:-len(".weight")] + suffix] = a
        deq[name] = d
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": False, "load_in_8bit": True,
          "llm_int8_threshold": 6.0, "llm_int8_has_fp16_weight": False,
          "llm_int8_skip_modules": sorted(n.split(".")[-2] for n in skip) or None,
          "llm_int8_enable_fp32_cpu_offload": False, "bnb_4bit_quant_type": "fp4",
          "bnb_4bit_use_double_quant": False, "bnb_4bit_compute_dtype": "float32",
          "bnb_4bit_quant_storage": "uint8"}
    ct_ref.write_pair(src, out, t, deq, qc, u8(t))
    return t


def rows_as_stored(build, tmp, out, tokens, failures):
    """--quantization int8 on an LLM.int8 checkpoint requantizes each row of
    its f32 weights; by qdef_i8's rule (scale = max |row| / 127, q =
    rint(w * 127 / max |row|)) that gives back the stored codes, with the
    scale of the dequantized row: bit-identical to a compressed-tensors W8A8
    twin that stores exactly those codes and scales. Returns whether it is."""
    t = ct_ref.read_raw(os.path.join(out, "model.safetensors"))
    for key in [k for k in t if k.endswith(".SCB")]:
        p = key[:-len("SCB")]
        q, scb = t.pop(p + "weight"), t.pop(key)
        t.pop(p + "weight_format", None)
        deq = (q.astype(np.float32) * scb[:, None]).astype(np.float32) * np.float32(1 / 127)
        t[p + "weight"] = q
        t[p + "weight_scale"] = (np.abs(deq).max(1) / np.float32(127)).astype(np.float32)[:, None]
    twin = out + "-w8a8"
    ct_ref.write_beside(out, twin, t, ct_ref.scheme())
    x = hq.logits(build, out, tokens, os.path.join(tmp, "rows-int8"), ["--quantization", "int8"])
    y = hq.logits(build, twin, tokens, os.path.join(tmp, "rows-w8a8"))
    same = np.array_equal(x.view(np.uint32), y.view(np.uint32))
    if not same:
        failures.append(f"{out}: --quantization int8 is not bit-identical to a W8A8 twin of its "
                        "stored codes (the requantized codes are not the stored ones)")
    return same


def u8(t):
    """ct_ref.write_st's dtypes for t: its uint8 arrays as U8."""
    return {name: "U8" for name, a in t.items() if a.dtype == np.uint8}


def make(src, out, qtype="nf4", blocksize=64, nested=True, dtype="bfloat16"):
    """src as a bitsandbytes 4-bit checkpoint at out, its dequantized weights
    as a plain f32 checkpoint at out + "-f32"; returns the tensors written."""
    w = llama_ref.load_weights(src)
    t, deq = ct_ref.begin_pair(src, out, w)
    for name, v in w.items():
        if not ct_ref.is_linear(name):
            continue
        parts, d = quantize(v, qtype, blocksize, nested, dtype)
        for suffix, a in parts.items():
            t[name + suffix] = a
        deq[name] = d
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
          "bnb_4bit_quant_type": qtype, "bnb_4bit_use_double_quant": nested,
          "bnb_4bit_compute_dtype": dtype, "bnb_4bit_quant_storage": "uint8",
          "llm_int8_skip_modules": None}
    ct_ref.write_pair(src, out, t, deq, qc, u8(t))
    return t


def refuse_configs(build, base, bad, cfg, failures):
    """base copied to bad with each (label, quantization_config edit, message
    expected) applied: each refused with its message."""
    for label, edit, want in cfg:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(base, bad)
        c = json.load(open(os.path.join(bad, "config.json")))
        c["quantization_config"].update(edit)
        json.dump(c, open(os.path.join(bad, "config.json"), "w"))
        hq.refused(build, bad, want, label, failures)


def refuse_tensors(build, base, bad, w, tensors, failures):
    """The same with each (label, edit of base's tensors w, message)."""
    for label, edit, want in tensors:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(base, bad)
        t = dict(w)
        edit(t)
        ct_ref.write_st(os.path.join(bad, "model.safetensors"), t, u8(t))
        hq.refused(build, bad, want, label, failures)


def refusals(build, tmp, base, failures):
    bad = os.path.join(tmp, "bad")
    L = "model.layers.0.self_attn.q_proj.weight"
    cfg = [("4- and 8-bit", {"load_in_8bit": True}, "exactly one of load_in_4bit and load_in_8bit"),
           ("8-bit said of 4-bit codes", {"load_in_8bit": True, "load_in_4bit": False}, "must be I8 [64, 64]"),
           ("storage", {"bnb_4bit_quant_storage": "bfloat16"}, "bnb_4bit_quant_storage 'bfloat16' is not supported")]
    refuse_configs(build, base, bad, cfg, failures)
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    state = json.loads(bytes(w[L + ".quant_state.bitsandbytes__nf4"]))

    def with_state(**kv):
        s = dict(state, **kv)
        return lambda t: t.update({L + ".quant_state.bitsandbytes__nf4":
                                   np.frombuffer(json.dumps(s).encode(), np.uint8).copy()})
    tensors = [
        ("short codes", lambda t: t.update({L: t[L][:-1]}), "a bitsandbytes 4-bit linear [64, 64] is U8 of 2048"),
        ("no quant_state", lambda t: t.pop(L + ".quant_state.bitsandbytes__nf4"), "without tensor"),
        ("quant_state not JSON", lambda t: t.update({L + ".quant_state.bitsandbytes__nf4": np.frombuffer(b"{oops", np.uint8).copy()}),
         "is not a JSON object"),
        ("wrong shape", with_state(shape=[32, 128]), "shape must be [64, 64]"),
        ("zero blocksize", with_state(blocksize=0), "blocksize must be a positive integer"),
        ("int8 dtype", with_state(dtype="int8"), "dtype 'int8' is not supported"),
        ("fp4 said nf4", with_state(quant_type="fp4"), "quant_type 'fp4' (expected 'nf4')"),
        ("NaN quant_map", lambda t: t.update({L + ".quant_map": np.full(16, np.nan, np.float32)}), "quant_map[0] is not finite"),
        ("short nested_absmax", lambda t: t.update({L + ".nested_absmax": np.zeros(0, np.float32)}), "nested_absmax' must be F32 of 1 values"),
        ("F32 absmax when nested", lambda t: t.update({L + ".absmax": t[L + ".absmax"].astype(np.float32)}),
         "absmax' must be U8 of 64 values"),
    ]
    refuse_tensors(build, base, bad, w, tensors, failures)
    print(f"  refused: {len(cfg)} unsupported configurations, {len(tensors)} broken checkpoints")


def refusals8(build, tmp, base, failures):
    """What a broken or unsupported LLM.int8 checkpoint gets."""
    bad = os.path.join(tmp, "bad8")
    P = "model.layers.0.self_attn.q_proj"
    cfg = [("fp16 weights", {"llm_int8_has_fp16_weight": True}, "llm_int8_has_fp16_weight true"),
           ("neither", {"load_in_8bit": False}, "exactly one of load_in_4bit and load_in_8bit")]
    refuse_configs(build, base, bad, cfg, failures)
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    tensors = [
        ("col_turing layout", lambda t: t.update({P + ".weight_format": np.array(2, np.uint8)}),
         "is 2: only the row layout (0) is supported"),
        ("no SCB", lambda t: t.pop(P + ".SCB"), "without the SCB tensor beside '" + P + ".weight'"),
        ("short SCB", lambda t: t.update({P + ".SCB": t[P + ".SCB"][:-1]}), "SCB' must be F32, F16 or BF16 of 64"),
        ("NaN SCB", lambda t: t.update({P + ".SCB": np.full(64, np.nan, np.float32)}), "SCB[0] is not finite"),
        ("flat codes", lambda t: t.update({P + ".weight": t[P + ".weight"].reshape(-1)}), "must be I8 [64, 64]"),
        ("two weight_format", lambda t: t.update({P + ".weight_format": np.zeros(2, np.uint8)}), "must be one U8"),
    ]
    refuse_tensors(build, base, bad, w, tensors, failures)
    print(f"  refused (8-bit): {len(cfg)} configurations, {len(tensors)} broken checkpoints")


def compare(build, tmp, out, tag, kernels, tokens, desc, failures):
    """out against its dequantized twin out + "-f32": logits on every kernel
    table and with --quantization int8 / int4, greedy tokens, the summary."""
    same, runs = 0, 0
    for k in kernels:
        x = hq.logits(build, out, tokens, os.path.join(tmp, tag + ".f32"), ["--kernels", k])
        y = hq.logits(build, out + "-f32", tokens, os.path.join(tmp, tag + "-deq.f32"), ["--kernels", k])
        same += np.array_equal(x.view(np.uint32), y.view(np.uint32))
        runs += 1
    if same != runs:
        failures.append(f"{tag}: logits differ from numpy's dequantized weights' ({same}/{runs} tables)")
    qs = []
    for q in ("int8", "int4"):
        x = hq.logits(build, out, tokens, os.path.join(tmp, tag + "-" + q), ["--quantization", q])
        y = hq.logits(build, out + "-f32", tokens, os.path.join(tmp, tag + "-deq-" + q),
                      ["--quantization", q])
        if np.array_equal(x.view(np.uint32), y.view(np.uint32)):
            qs.append(q)
        else:
            failures.append(f"{tag}: --quantization {q} differs from the dequantized checkpoint's")
        hq.describes(build, out, f"then requantized to {q}; activations int8 per token", tag,
                     failures, ["--quantization", q])
    g = hq.greedy(build, out, tokens)
    gd = hq.greedy(build, out + "-f32", tokens)
    hq.describes(build, out, desc, tag, failures)
    if g != gd:
        failures.append(f"{tag}: greedy tokens differ from the dequantized checkpoint's")
    print(f"  {tag:36s} logits bit-identical in {same}/{runs} kernel tables, with "
          f"--quantization {' and '.join(qs) or 'NEITHER'}; greedy {'equal' if g == gd else 'DIFFER'}")


def fresh(out):
    for d in (out, out + "-f32"):
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    a = ap.parse_args()
    tmp = os.path.join(a.build, "tmp", "bnb")
    os.makedirs(tmp, exist_ok=True)
    kernels = ce.supported_kernels(a.build, os.path.join(a.fixtures, "tiny"))
    tokens = "1,7,3,12,9,4,30,2,11,5"
    failures = []
    cases = [  # source, quant type, blocksize, double quantization, dtype
        ("tiny", "nf4", 64, True, "bfloat16"),
        ("tiny", "nf4", 64, False, "float16"),
        ("tiny", "fp4", 96, False, "float32"),  # blocks across rows, a short last one
        ("wide", "nf4", 128, True, "bfloat16"),
        ("fam-phi3", "nf4", 64, True, "bfloat16"),  # fused qkv / gate_up
    ]
    print("bitsandbytes 4-bit vs numpy:")
    for src, qtype, bs, nested, dtype in cases:
        tag = f"{src}-{qtype}-b{bs}{'-nested' if nested else ''}-{dtype}"
        out = os.path.join(tmp, tag)
        fresh(out)
        make(os.path.join(a.fixtures, src), out, qtype, bs, nested, dtype)
        compare(a.build, tmp, out, tag, kernels, tokens,
                f"bitsandbytes 4-bit {qtype} (dequantized to f32 at load", failures)
    refusals(a.build, tmp, os.path.join(tmp, "tiny-nf4-b64-nested-bfloat16"), failures)
    print("bitsandbytes 8-bit (LLM.int8) vs numpy:")
    skip = ("model.layers.1.mlp.down_proj.weight",)
    for src, sk in (("tiny", ()), ("tiny", skip), ("wide", ()), ("fam-phi3", ())):
        tag = f"{src}-int8{'-skip' if sk else ''}"
        out = os.path.join(tmp, tag)
        fresh(out)
        make8(os.path.join(a.fixtures, src), out, sk)
        compare(a.build, tmp, out, tag, kernels, tokens, "bitsandbytes 8-bit LLM.int8", failures)
        if not sk and rows_as_stored(a.build, tmp, out, tokens, failures):
            print(f"  {tag:36s} --quantization int8 bit-identical to a W8A8 twin of its stored "
                  "codes")
    refusals8(a.build, tmp, os.path.join(tmp, "tiny-int8"), failures)
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
