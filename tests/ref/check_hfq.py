#!/usr/bin/python3
"""GPTQ and AWQ checkpoints (engine/hfq.c) against numpy.

A test model's seven layer matrices are quantized to 4 bits in groups and
packed the way GPTQ (AutoGPTQ's int32 layouts, desc_act with a shuffled
g_idx, zeros stored minus one, and the gptq_v2 format without) and AWQ
(version gemm, its interleaved nibble order) write them, with the
quantization_config transformers writes. Written from the formats'
descriptions, not from inferd's code:

  GPTQ  qweight I32 [K/8, N]: input k of output n in bits 4(k%8) of [k/8][n]
        qzeros I32 [G, N/8]: output n's zero in bits 4(n%8) of [g][n/8]
        scales F16 [G, N]; g_idx I32 [K]: the group of input k
  AWQ   qweight I32 [K, N/8], qzeros I32 [G, N/8]: nibble i of column j is
        output 8j + [0, 2, 4, 6, 1, 3, 5, 7][i]; scales F16 [G, N]
  W[n][k] = scale[g][n] * (q - zero[g][n])

Checks: logits bit-identical to a plain f32 checkpoint of numpy's unpacked
weights and the same greedy tokens; unsupported configurations and broken
tensors are refused by name; and --quantization int4:

  * where every 32 inputs share a group once sorted by group (group_size a
    multiple of 32 or -1; desc_act's shuffled g_idx, one per linear or one
    per input as AutoGPTQ's order gives q/k/v and gate/up) the
    checkpoint's own codes, zeros and scales run: llama_ref's W4A8 with
    those integers (weights (q - zero) per 32 inputs with the group's
    scale, activations int8 per token, taken in the sorted order) within
    check_engine's int8 bounds, every kernel table and a chunked prefill
    bit-identical, the same greedy tokens as that reference;
  * elsewhere (groups of 40) the unpacked weights are requantized:
    bit-identical to --quantization int4 on the plain f32 checkpoint.

  check_hfq.py --build build --fixtures build/fixtures
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check_engine as ce  # noqa: E402
import gguf_ref  # noqa: E402  (read_safetensors)
import llama_ref  # noqa: E402

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
SHARES = {"self_attn.q_proj": "qkv", "self_attn.k_proj": "qkv", "self_attn.v_proj": "qkv",
          "mlp.gate_proj": "gate_up", "mlp.up_proj": "gate_up"}  # linears on one input


def write_st(path, tensors):
    """{name: array} with each array's own dtype (float32, float16, int32)."""
    dt = {np.dtype("float32"): "F32", np.dtype("float16"): "F16", np.dtype("int32"): "I32"}
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def quantize(w, g_idx, groups, sym=False, bits=4):
    """Asymmetric b-bit per (group, output): q [N, K], zero [G, N], scale
    [G, N] (float16), and the unpacked weights scale * (q - zero) in f32.
    sym: GPTQ's symmetric form, the range +-max|w| and every zero
    2^(b-1)."""
    N, K = w.shape
    maxq = 2 ** bits - 1
    q = np.zeros((N, K), np.int64)
    zero = np.zeros((groups, N), np.int64)
    scale = np.zeros((groups, N), np.float16)
    for g in range(groups):
        ks = np.nonzero(g_idx == g)[0]
        sub = w[:, ks]
        lo, hi = np.minimum(sub.min(1), 0), np.maximum(sub.max(1), 0)
        if sym:
            hi = np.maximum(hi, -lo)
            lo = -hi
        s = ((hi - lo) / maxq).astype(np.float16)
        sf = np.where(s == 0, 1, s.astype(np.float32))
        z = (np.full(N, (maxq + 1) // 2) if sym else
             np.clip(np.rint(-lo / sf), 1, maxq).astype(np.int64))  # >= 1: v1 stores z - 1
        q[:, ks] = np.clip(np.rint(sub / sf[:, None]) + z[:, None], 0, maxq)
        zero[g], scale[g] = z, s
    deq = scale.astype(np.float32)[g_idx].T * (q - zero[g_idx].T).astype(np.float32)
    return q, zero, scale, deq


def pack_gptq(q, zero, v1, bits=4):
    """pf = 32 / bits values per int32, the first in the low bits: inputs
    down qweight's rows, outputs along qzeros' columns."""
    N, K = q.shape
    pf = 32 // bits
    qw = np.zeros((K // pf, N), np.uint32)
    for i in range(pf):
        qw |= (q[:, i::pf].T.astype(np.uint32) << np.uint32(bits * i))
    z = zero - (1 if v1 else 0)
    qz = np.zeros((z.shape[0], N // pf), np.uint32)
    for i in range(pf):
        qz |= (z[:, i::pf].astype(np.uint32) << np.uint32(bits * i))
    return qw.view(np.int32), qz.view(np.int32)


def pack_awq(q, zero):
    N, K = q.shape
    qw = np.zeros((K, N // 8), np.uint32)
    qz = np.zeros((zero.shape[0], N // 8), np.uint32)
    for i in range(8):
        qw |= (q[AWQ_ORDER[i]::8, :].T.astype(np.uint32) << np.uint32(4 * i))
        qz |= (zero[:, AWQ_ORDER[i]::8].astype(np.uint32) << np.uint32(4 * i))
    return qw.view(np.int32), qz.view(np.int32)


def make(src, out, deq_out, method, group, desc_act=False, v2=False, seed=0, sym=False, bits=4):
    """src as a GPTQ / AWQ checkpoint at out, and its unpacked weights as a
    plain f32 checkpoint at deq_out."""
    rng = np.random.default_rng(seed)
    w = {}
    for f in os.listdir(src):
        if f.endswith(".safetensors"):
            w.update(gguf_ref.read_safetensors(os.path.join(src, f)))
    for d in (out, deq_out):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(src):
            if not f.endswith(".safetensors") and not f.endswith(".index.json"):
                shutil.copy(os.path.join(src, f), os.path.join(d, f))
    qt, deq, codes, perms = {}, {}, {}, {}
    for name, v in w.items():
        prefix = name[:-len(".weight")]
        if not any(prefix.endswith(s) for s in LINEARS):
            qt[name] = deq[name] = v.astype(np.float32)
            continue
        N, K = v.shape
        gs = group if group > 0 else K
        G = -(-K // gs)
        g_idx = np.arange(K) // gs
        if desc_act:  # GPTQ's act-order: groups over a permutation of the inputs
            # "shared": one per input, as AutoGPTQ's Hessian order gives
            # q/k/v and gate/up; else one per linear
            leaf = ".".join(prefix.split(".")[-2:])  # "self_attn.q_proj"
            key = (prefix[:-len(leaf)], SHARES.get(leaf, leaf))
            if desc_act != "shared" or key not in perms:
                perms[key] = np.argsort(rng.permutation(K))
            g_idx = g_idx[perms[key]]
        q, zero, scale, d = quantize(v.astype(np.float32), g_idx, G, sym, bits)
        codes[name] = (q, zero, scale, g_idx)
        if method == "gptq":
            qw, qz = pack_gptq(q, zero, not v2, bits)
            qt[prefix + ".g_idx"] = g_idx.astype(np.int32)
        else:
            qw, qz = pack_awq(q, zero)
        qt[prefix + ".qweight"], qt[prefix + ".qzeros"], qt[prefix + ".scales"] = qw, qz, scale
        deq[name] = d
    write_st(os.path.join(out, "model.safetensors"), qt)
    write_st(os.path.join(deq_out, "model.safetensors"), deq)
    c = json.load(open(os.path.join(src, "config.json")))
    qc = {"quant_method": method, "bits": bits, "group_size": group}
    if method == "gptq":
        qc.update({"desc_act": desc_act, "sym": sym})
        if v2:
            qc["checkpoint_format"] = "gptq_v2"
    else:
        qc.update({"version": "gemm", "zero_point": True})
    c["quantization_config"] = qc
    json.dump(c, open(os.path.join(out, "config.json"), "w"), indent=2)
    return qt, codes


def codes_fit(g_idx):
    """Whether the int4 kernels can run a linear's codes as stored: with its
    inputs sorted by group (GPTQ's act-order puts them in any order), every
    32 consecutive ones in one group."""
    g = np.sort(g_idx, kind="stable")
    K = len(g)
    return all((g[b:b + 32] == g[b]).all() for b in range(0, K, 32))


def w4a8_codes(codes):
    """The checkpoint's integers as llama_ref's int4 weights: per 32 inputs
    (q - zero) [N, B, 32] (zero-padded past K) and the group's scale [N, B],
    the inputs sorted by group (an act-order g_idx: the activations taken
    in that order too), for groups that are whole 32s of inputs so."""
    out = {}
    for name, (q, zero, scale, g_idx) in codes.items():
        N, K = q.shape
        B = -(-K // 32)
        order = np.argsort(g_idx, kind="stable")
        g = g_idx[order]
        e = np.zeros((N, B * 32))
        e[:, :K] = (q - zero[g_idx].T)[:, order]
        d = scale.astype(np.float64)[g[::32]].T  # the group of each 32's first input
        out[name] = (e.reshape(N, B, 32), d) if (order == np.arange(K)).all() else \
            (e.reshape(N, B, 32), d, order)
    return out


def split_fused(qw, c):
    """Phi-3's qkv_proj and gate_up_proj entries of w4a8_codes as the separate
    names llama_ref computes (rows q|k|v, gate|up; each part keeps the order
    of inputs)."""
    parts = llama_ref.fused_rows(c)
    out = {}
    for name, v in qw.items():
        fused = next((f for f in parts if name.endswith(f + ".weight")), None)
        if not fused:
            out[name] = v
            continue
        for leaf, r0, r1 in parts[fused]:
            out[name[:-len(fused + ".weight")] + leaf + ".weight"] = (v[0][r0:r1], v[1][r0:r1]) + v[2:]
    return out


def check_codes_int4(build, tmp, tag, model, deq, codes, tokens, kernels, failures, extra=()):
    """--quantization int4 on a checkpoint whose codes run as stored,
    against llama_ref's W4A8 of those integers (extra: generate's further
    flags, e.g. --tokenizer)."""
    ids = [int(t) for t in tokens.split(",")]
    ref = llama_ref.Llama(deq, "int4")
    ref.qw.update(split_fused(w4a8_codes(codes), ref.c))
    want, _, _ = llama_ref.generate(ref, ids, 0, False)
    tie = ref.first_tie
    gen_ref = llama_ref.Llama(deq, "int4")
    gen_ref.qw = ref.qw
    _, gen_ids, margin = llama_ref.generate(gen_ref, ids, 30, False)
    dumps = ce.dump_runs(build, tmp, tag + "-codes", model, tokens, kernels,
                         ["--quantization", "int4"], (0, 3))
    rel = np.max([ce.rel_err(g, want) for g in ce.first_as_f64(dumps, want.shape)], axis=0)
    at, exact, loose = ce.tie_bounds(rel, tie, f"{tag}: int4 logits",
                                     "W4A8 of the checkpoint's codes", failures)
    ce.check_identical(dumps, tag, "int4 logits", failures)
    got = greedy(build, model, tokens, ["--quantization", "int4"] + list(extra))
    if got != [str(i) for i in gen_ids]:
        failures.append(f"{tag}: int4 greedy tokens differ from W4A8 of the checkpoint's codes")
    return exact, at, loose, len(dumps), margin


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def logits(build, model, tokens, out, extra=()):
    run([os.path.join(build, "dump_logits"), "--model", model, "--tokens", tokens, "--out", out]
        + list(extra))
    return np.fromfile(out, "<f4")


def greedy(build, model, tokens, extra=()):
    return run([os.path.join(build, "inferd"), "generate", "--model", model, "--prompt-ids", tokens,
                "--max-tokens", "30", "--ignore-eos", "--output-ids", "--quiet"]
               + list(extra)).stdout.split()


def describes(build, model, want, label, failures, extra=()):
    """generate's summary line names what the checkpoint became."""
    r = subprocess.run([os.path.join(build, "inferd"), "generate", "--model", model, "--prompt-ids", "1,2",
                        "--max-tokens", "1"] + list(extra), capture_output=True, text=True)
    if r.returncode != 0 or want not in r.stderr:
        failures.append(f"{label}: generate's summary does not say {want!r}: {r.stderr.strip()!r}")


def refused(build, model, want, label, failures):
    r = run([os.path.join(build, "dump_logits"), "--model", model, "--tokens", "1,2", "--out",
             os.devnull], ok=False)
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"{label}: exit {r.returncode}, {r.stderr.strip()!r} (expected {want!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--write-gptq", nargs=2, metavar=("SRC", "OUT"),
                    help="only write SRC as a GPTQ checkpoint (groups of 32, zero points) at "
                         "OUT, and its unpacked weights at OUT-deq (a test fixture)")
    ap.add_argument("--desc-act", action="store_true",
                    help="with --write-gptq: desc_act, each linear's inputs in its own order")
    a = ap.parse_args()
    if a.write_gptq:
        make(a.write_gptq[0], a.write_gptq[1], a.write_gptq[1] + "-deq", "gptq", 32, a.desc_act)
        return
    tmp = os.path.join(a.build, "tmp", "hfq")
    os.makedirs(tmp, exist_ok=True)
    failures = []
    tokens = "1,7,3,12,9,4,30,2,11,5"
    kernels = ce.supported_kernels(a.build, os.path.join(a.fixtures, "tiny"))
    print("GPTQ / AWQ vs numpy:")
    cases = [("gptq", 32, False, False), ("gptq", 32, True, False), ("gptq", -1, False, True),
             ("awq", 32, False, False), ("gptq", 64, False, False), ("gptq-sym", 32, False, False),
             ("gptq", 64, "shared", False)]
    for src_name in ("tiny", "wide"):
        src = os.path.join(a.fixtures, src_name)
        for method, group, desc, v2 in cases:
            if src_name == "wide" and (group == 64 or method == "gptq-sym" or desc == "shared"):
                continue
            sym = method == "gptq-sym"  # every zero 8: the symmetric int4 layout
            method = "gptq" if sym else method
            if src_name == "wide" and group > 0:
                group = 40  # wide's 80 / 600-input rows: groups of 40
            tag = (f"{src_name}-{method}{'-sym' if sym else ''}{'_v2' if v2 else ''}-"
                   f"{'g' + str(group) if group > 0 else 'per-row'}{'-desc_act' if desc else ''}{'-shared' if desc == 'shared' else ''}")
            out, deq = os.path.join(tmp, tag), os.path.join(tmp, tag + "-deq")
            _, codes = make(src, out, deq, method, group, desc, v2, sym=sym)
            x = logits(a.build, out, tokens, os.path.join(tmp, tag + ".f32"))
            y = logits(a.build, deq, tokens, os.path.join(tmp, tag + "-deq.f32"))
            same = x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))
            geq = greedy(a.build, out, tokens) == greedy(a.build, deq, tokens)
            if not same:
                failures.append(f"{tag}: logits differ from numpy's unpacked weights'")
            if not geq:
                failures.append(f"{tag}: greedy tokens differ from numpy's unpacked weights'")
            print(f"  {tag:28s} logits {'bit-identical' if same else 'DIFFER'} to numpy's unpacked "
                  f"weights, greedy {'equal' if geq else 'DIFFER'}")
            z = logits(a.build, out, tokens, os.path.join(tmp, tag + "-int4.f32"), ["--quantization", "int4"])
            zr = logits(a.build, deq, tokens, os.path.join(tmp, tag + "-deq-int4.f32"),
                        ["--quantization", "int4"])
            e4 = float((np.abs(z - x).reshape(10, -1).max(1) / np.abs(x).reshape(10, -1).max(1)).max())
            r4 = float((np.abs(zr - x).reshape(10, -1).max(1) / np.abs(x).reshape(10, -1).max(1)).max())
            fits = all(codes_fit(c[3]) for c in codes.values())
            how = ("groups not whole 32s of inputs" if not fits else
                   "as stored, inputs sorted by group" if desc else "as stored; activations")
            describes(a.build, out, f"{method} 4-bit (dequantized to f32 at load; activations not "
                      "quantized)", tag, failures)
            describes(a.build, out, how, tag, failures, ["--quantization", "int4"])
            describes(a.build, out, f"{method} 4-bit (dequantized to f32, then requantized to int8; "
                      "activations int8 per token)", tag, failures, ["--quantization", "int8"])
            if fits:
                exact, at, loose, runs, margin = check_codes_int4(a.build, tmp, tag, out, deq, codes,
                                                                  tokens, kernels, failures)
                ties = f"from position {at} {loose:.1e}" if at < 10 else "no near ties"
                print(f"    int4, codes as stored: {exact:.1e} from W4A8 of them ({ties}), {runs} "
                      f"runs identical; from the f32 logits {e4:.1e} (requantized: {r4:.1e})")
            else:
                if not np.array_equal(z.view(np.uint32), zr.view(np.uint32)):
                    failures.append(f"{tag}: int4 (requantized) differs from int4 on the plain "
                                    "checkpoint")
                print(f"    int4, requantized (groups not whole 32s): bit-identical to "
                      f"int4 on the plain checkpoint; from the f32 logits {e4:.1e}")
    # 8-bit GPTQ: dequantized to f32 (never the int4 codes or int8 rows:
    # zero points per group); --quantization requantizes it like any f32
    print("GPTQ 8-bit vs numpy:")
    for src_name, group, desc, v2, sym in (("tiny", 32, False, False, False),
                                           ("tiny", 32, True, False, True),
                                           ("tiny", -1, False, True, False),
                                           ("wide", 40, False, False, False)):
        tag = (f"{src_name}-gptq8{'-sym' if sym else ''}{'_v2' if v2 else ''}-"
               f"{'g' + str(group) if group > 0 else 'per-row'}{'-desc_act' if desc else ''}")
        out, deq = os.path.join(tmp, tag), os.path.join(tmp, tag + "-deq")
        make(os.path.join(a.fixtures, src_name), out, deq, "gptq", group, desc, v2, sym=sym, bits=8)
        x = logits(a.build, out, tokens, os.path.join(tmp, tag + ".f32"))
        y = logits(a.build, deq, tokens, os.path.join(tmp, tag + "-deq.f32"))
        same = x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32))
        geq = greedy(a.build, out, tokens) == greedy(a.build, deq, tokens)
        if not same or not geq:
            failures.append(f"{tag}: logits or greedy tokens differ from numpy's unpacked weights'")
        describes(a.build, out, "gptq 8-bit (dequantized to f32 at load; activations not quantized)",
                  tag, failures)
        requant = []
        for qn in ("int8", "int4"):
            z = logits(a.build, out, tokens, os.path.join(tmp, f"{tag}-{qn}.f32"), ["--quantization", qn])
            zr = logits(a.build, deq, tokens, os.path.join(tmp, f"{tag}-deq-{qn}.f32"),
                        ["--quantization", qn])
            if not np.array_equal(z.view(np.uint32), zr.view(np.uint32)):
                failures.append(f"{tag}: {qn} differs from {qn} on the plain checkpoint")
            describes(a.build, out, f"gptq 8-bit (dequantized to f32, then requantized to {qn}; "
                      "activations int8 per token)", tag, failures, ["--quantization", qn])
            requant.append(float((np.abs(z - x).reshape(10, -1).max(1) /
                                  np.abs(x).reshape(10, -1).max(1)).max()))
        print(f"  {tag:28s} logits {'bit-identical' if same else 'DIFFER'} to numpy's unpacked "
              f"weights, greedy {'equal' if geq else 'DIFFER'}; int8 and int4 bit-identical to "
              f"them on the plain checkpoint ({requant[0]:.1e}, {requant[1]:.1e} from f32)")
    # refusals
    base = os.path.join(tmp, "tiny-gptq-g32")  # made above
    bad = os.path.join(tmp, "bad")
    for label, edit, want in [
            ("hqq", lambda c: c["quantization_config"].update({"quant_method": "hqq"}),
             "quant_method 'hqq' is not supported"),
            ("3 bits", lambda c: c["quantization_config"].update({"bits": 3}),
             "gptq with 3 bits is not supported (4, 8)"),
            ("awq 8 bits", lambda c: c["quantization_config"].update({"quant_method": "awq", "bits": 8}),
             "awq with 8 bits is not supported (4)"),
            ("awq gemv", lambda c: c["quantization_config"].update({"quant_method": "awq", "version": "gemv"}),
             "awq version 'gemv' is not supported")]:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(base, bad)
        c = json.load(open(os.path.join(bad, "config.json")))
        edit(c)
        json.dump(c, open(os.path.join(bad, "config.json"), "w"))
        refused(a.build, bad, want, label, failures)
    shutil.rmtree(bad, ignore_errors=True)
    os.makedirs(bad)
    src = os.path.join(a.fixtures, "tiny")
    qt, _ = make(src, bad, os.path.join(tmp, "bad-deq"), "gptq", 32)
    qt["model.layers.0.self_attn.q_proj.g_idx"] = np.full_like(qt["model.layers.0.self_attn.q_proj.g_idx"], 99)
    write_st(os.path.join(bad, "model.safetensors"), qt)
    refused(a.build, bad, "q_proj.g_idx[0] is 99", "g_idx out of range", failures)
    del qt["model.layers.1.mlp.up_proj.scales"]
    qt["model.layers.0.self_attn.q_proj.g_idx"] = np.arange(64, dtype=np.int32) // 32
    write_st(os.path.join(bad, "model.safetensors"), qt)
    refused(a.build, bad, "without tensor 'model.layers.1.mlp.up_proj.scales'", "missing scales", failures)
    print("  refused: hqq, 3 bits, awq with 8 bits, awq gemv, g_idx out of range, missing scales")
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
