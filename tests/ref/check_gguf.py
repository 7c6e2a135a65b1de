#!/usr/bin/python3
"""GGUF end to end against tests/ref/gguf_ref.py (numpy, from the format's
definitions):

  * blocks: every type's values, as build/gguf_dump reads them, equal the
    numpy dequantization bit for bit, for random block bytes (finite scales)
    and for quantized real values;
  * lossless files: a model written as GGUF in F32 (and BF16 / F16 from a
    checkpoint of that dtype) gives bit-identical logits and the same greedy
    tokens as its safetensors directory;
  * quantized files (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
    Q6_K, IQ4_NL, IQ4_XS, a Q4_K_M-like mix and a Q3_K_M-like one):
    logits bit-identical to a safetensors checkpoint of numpy's dequantized
    weights; with --quantization int8 / int4 the conversion error (logits
    against the file's own) is printed;
  * corrupt files (bad magic, version, truncation, offsets, types, absurd
    sizes) are refused with a message naming the problem, never a crash.

  check_gguf.py --build build --fixtures build/fixtures [--shared ../shared]
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
import gguf_ref as G  # noqa: E402

PY = sys.executable
MAKE_MODEL = os.path.join(ROOT, "scripts", "make_model.py")
QTYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
          "IQ4_XS")


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def rand_blocks(rng, tname, nblocks):
    """Random bytes of nblocks blocks whose f16 scales are finite."""
    per, size = G.BLOCK[tname]
    b = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    f16 = lambda n: rng.standard_normal((nblocks, n)).astype("<f2").view(np.uint8)  # noqa: E731
    if tname in ("Q8_0", "Q4_0", "Q5_0", "IQ4_NL", "IQ4_XS"):
        b[:, 0:2] = f16(1)
    elif tname in ("Q4_1", "Q5_1"):
        b[:, 0:4] = f16(2)
    elif tname == "Q2_K":
        b[:, 80:84] = f16(2)
    elif tname == "Q3_K":
        b[:, 108:110] = f16(1)
    elif tname in ("Q4_K", "Q5_K"):
        b[:, 0:4] = f16(2)
    elif tname == "Q6_K":
        b[:, 208:210] = f16(1)
    elif tname in ("F16",):
        b[:] = f16(size // 2)
    elif tname == "BF16":
        b[:] = rng.standard_normal((nblocks, 1)).astype(np.float32).view(np.uint8)[:, 2:4]
    elif tname == "F32":
        b[:] = rng.standard_normal((nblocks, 1)).astype(np.float32).view(np.uint8)
    return b.tobytes()


def check_peer(peer, failures):
    """With a llama.cpp tree at hand (--peer, ../shared/tools/peer/), its own
    numpy dequantizers (gguf-py, run as an instrument) against gguf_ref's on
    random blocks of every quantized type: the block layouts as written here
    are llama.cpp's, not only consistent with inferd's reading of them."""
    sys.path.insert(0, os.path.join(peer, "gguf-py"))
    from gguf import GGMLQuantizationType, quants  # noqa: E402
    rng = np.random.default_rng(11)
    for t in QTYPES:
        per, _ = G.BLOCK[t]
        raw = rand_blocks(rng, t, 64)
        mine = G.dequant(t, raw, 64 * per)
        theirs = quants.dequantize(np.frombuffer(raw, np.uint8).reshape(1, -1),
                                   getattr(GGMLQuantizationType, t)).reshape(-1).astype(np.float32)
        if not np.array_equal(mine.view(np.uint32), theirs.view(np.uint32)):
            failures.append(f"{t}: gguf_ref's values differ from llama.cpp's gguf-py")
    print(f"  llama.cpp's gguf-py ({peer}): {len(QTYPES)} types' random blocks bit-identical to gguf_ref")


def check_blocks(build, tmp, failures):
    rng = np.random.default_rng(5)
    tensors, want = [], {}
    for t in ("F32", "F16", "BF16") + QTYPES:
        per, _ = G.BLOCK[t]
        cols = 512 if per > 1 else 96
        raw = rand_blocks(rng, t, 3 * cols // per)
        tensors.append((f"rand.{t}", t, [cols, 3], raw))
        want[f"rand.{t}"] = G.dequant(t, raw, 3 * cols)
        x = (rng.standard_normal(2 * 512) * rng.uniform(0.01, 3)).astype(np.float32)
        raw = G.quantize(t, x)
        tensors.append((f"real.{t}", t, [512, 2], raw))
        want[f"real.{t}"] = G.dequant(t, raw, x.size)
        err = float(np.abs(want[f"real.{t}"] - x).max() / np.abs(x).max())
        # half a step of the block's range: 4 levels (Q2_K) reach a sixth of a
        # range up to twice the largest |x|, plus its 4-bit scale's rounding
        if t in QTYPES and not err < (0.4 if t == "Q2_K" else 0.2):
            failures.append(f"gguf_ref's own {t} quantizer is off: max error {err:.2e}")
    path = os.path.join(tmp, "blocks.gguf")
    G.write_gguf(path, [("general.architecture", G.V_STRING, "none")], tensors)
    out = os.path.join(tmp, "blocks")
    os.makedirs(out, exist_ok=True)
    run([os.path.join(build, "gguf_dump"), path, out])
    for name, v in want.items():
        got = np.fromfile(os.path.join(out, name + ".f32"), "<f4")
        if got.shape != v.shape or not np.array_equal(got.view(np.uint32), v.view(np.uint32)):
            failures.append(f"{name}: inferd's dequantized values differ from numpy's")
    print(f"  blocks: {len(want)} tensors (random bytes and quantized values, "
          f"{'/'.join(('F32', 'F16', 'BF16') + QTYPES)}) bit-identical to numpy")


def logits(build, tmp, model, tokens, tag, extra=()):
    out = os.path.join(tmp, tag + ".f32")
    run([os.path.join(build, "dump_logits"), "--model", model, "--tokens", tokens, "--out", out]
        + list(extra))
    return np.fromfile(out, "<f4")


def greedy(build, model, tokens, tok_dir, extra=()):
    r = run([os.path.join(build, "inferd"), "generate", "--model", model, "--tokenizer", tok_dir,
             "--prompt-ids", tokens,
             "--max-tokens", "40", "--ignore-eos", "--output-ids", "--quiet"] + list(extra))
    return r.stdout.split()


def unpermute(w, heads):
    r = w.shape[0]
    return w.reshape(heads, r // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_dequantized(src, held, out, names=None):
    """A safetensors directory of numpy's dequantized weights (f32), with
    src's config and tokenizer: the function the GGUF file defines (names:
    {gguf name: HF name}, for families other than llama)."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_model  # noqa: E402
    os.makedirs(out, exist_ok=True)
    for f in os.listdir(src):
        if not f.endswith(".safetensors") and not f.endswith(".index.json"):
            shutil.copy(os.path.join(src, f), os.path.join(out, f))
    c = json.load(open(os.path.join(src, "config.json")))
    H, KV = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    back = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
    per = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj"}
    tensors = []
    for g, (_, v, _) in held.items():
        if names:
            name = names[g]
        elif g in back:
            name = back[g]
        else:
            _, n, sub, _ = g.split(".")
            name = f"model.layers.{n}.{per[sub]}.weight"
        if g.endswith("attn_q.weight"):
            v = unpermute(v, H)
        elif g.endswith("attn_k.weight"):
            v = unpermute(v, KV)
        tensors.append((name, v))
    make_model.write_safetensors(os.path.join(out, "model.safetensors"), tensors, "F32")


def said_types(build, path, tok_dir, types, label, failures):
    """generate's summary names the block types of the layer matrices made
    f32 (each once): "checkpoint GGUF Q4_K, Q6_K (dequantized to f32 at load)"."""
    import re
    r = run([os.path.join(build, "inferd"), "generate", "--model", path, "--tokenizer", tok_dir,
             "--prompt-ids", "1,2", "--max-tokens", "1"], ok=False)
    m = re.search(r"checkpoint GGUF ([A-Z0-9_, ]+) \(dequantized to f32 at load\)", r.stderr)
    got = m.group(1).split(", ") if m else []
    if r.returncode or sorted(got) != sorted(types):
        failures.append(f"{label}: generate's summary names {got} as dequantized, not "
                        f"{sorted(types)}: {r.stderr.strip()[-300:]!r}")


def serve_log(build, path, tok_dir, extra=()):
    """inferd serve's log up to its being ready (then stopped)."""
    import socket
    import time
    import urllib.request
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    p = subprocess.Popen([os.path.join(build, "inferd"), "serve", "--model", path, "--tokenizer",
                          tok_dir, "--port", str(port)] + list(extra),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
    finally:
        p.terminate()
        err = p.communicate(timeout=30)[1]
    return err


def check_f32_warning(build, tmp, path, tok_dir, failures):
    """serve warns when a quantized file's layer matrices are held as f32
    (no --quantization on the CPU), and not when they are packed."""
    plain, packed = serve_log(build, path, tok_dir), serve_log(build, path, tok_dir,
                                                               ["--quantization", "int4"])
    said = "quantized weights are held as f32"
    if said not in plain or said in packed or " loaded " not in packed:
        failures.append(f"serve's f32 warning: without --quantization {said in plain}, with int4 "
                        f"{said in packed} (want True, False)")
    else:
        print("  serve warns that a Q4_0 file's weights are held as f32 without --quantization, "
              "not with int4")


def check_lossless(build, tmp, label, model, tname, failures):
    path = os.path.join(tmp, f"{label}-{tname}.gguf")
    G.from_hf(model, path, tname, tname)
    tokens = "1,7,3,12,9,4,30,2,11,5"
    a, b = logits(build, tmp, model, tokens, label + "-st"), logits(build, tmp, path, tokens, label + "-gguf")
    same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    ga, gb = greedy(build, model, tokens, model), greedy(build, path, tokens, model)
    if not same:
        failures.append(f"{label} as GGUF {tname}: logits differ from the safetensors model's")
    if ga != gb:
        failures.append(f"{label} as GGUF {tname}: greedy tokens differ")
    print(f"  {label + ' as GGUF ' + tname:36s} logits {'bit-identical' if same else 'DIFFER'}, "
          f"greedy {len(gb)} tokens {'equal' if ga == gb else 'DIFFER'} to the safetensors model")


def check_quantized(build, tmp, label, model, tname, failures, override=None):
    path = os.path.join(tmp, f"{label}-{tname}.gguf")
    held = G.from_hf(model, path, {"mix": "Q4_K", "mix3": "Q3_K"}.get(tname, tname), "F32", override)
    deq = os.path.join(tmp, f"{label}-{tname}-dequantized")
    write_dequantized(model, held, deq)
    tokens = "1,7,3,12,9,4,30,2,11,5"
    a, b = logits(build, tmp, deq, tokens, label + "-deq"), logits(build, tmp, path, tokens, label + "-q")
    same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    if not same:
        failures.append(f"{label} as GGUF {tname}: logits differ from numpy's dequantized weights'")
    if greedy(build, deq, tokens, model) != greedy(build, path, tokens, model):
        failures.append(f"{label} as GGUF {tname}: greedy tokens differ from the dequantized model")
    # weight conversion error of int8 / int4 on the file's own values (the
    # reference's quantizers), energy-weighted over the layer matrices
    import llama_ref  # noqa: E402
    e8 = e4 = tot = 0.0
    for g, (_, v, _) in held.items():
        if v.ndim != 2 or not g.startswith("blk."):
            continue
        q, sc = llama_ref.quantize(v.astype(np.float32))[:2]
        q4, d4 = llama_ref.quantize4(v.astype(np.float32))
        w4 = (q4 * d4[..., None]).reshape(v.shape[0], -1)[:, :v.shape[1]]
        e8 += float(((q * sc[:, None] - v) ** 2).sum())
        e4 += float(((w4 - v) ** 2).sum())
        tot += float((v.astype(np.float64) ** 2).sum())
    if tname == "Q4_0" and e4 != 0.0:
        failures.append(f"{label} as GGUF Q4_0: int4 should hold its values exactly (error {e4 / tot:.1e})")
    said_types(build, path, model, {t for g, (t, v, _) in held.items()
                                     if v.ndim == 2 and g.startswith("blk.")}, label, failures)
    b2 = b.reshape(len(tokens.split(",")), -1).astype(np.float64)
    errs = []
    for q in ("int8", "int4"):
        c = logits(build, tmp, path, tokens, f"{label}-{tname}-{q}", ["--quantization", q])
        c = c.reshape(b2.shape).astype(np.float64)
        errs.append(f"{q} {float((np.abs(c - b2).max(1) / np.abs(b2).max(1)).max()):.1e}")
    print(f"  {label + ' as GGUF ' + tname:36s} logits {'bit-identical' if same else 'DIFFER'} to "
          f"numpy's dequantized weights; requantized: weights int8 {e8 / tot:.1e}, int4 "
          f"{e4 / tot:.1e} (squared error / energy); logits with W8A8 / W4A8: {', '.join(errs)}")

def q4_0_seven(tname, v):
    """Q4_0 blocks as a quantizer other than llama.cpp's may write them:
    d = f16(a / -7) for the value a of largest |a|, codes 1 to 15 (ggml's
    puts that value at code 0). Requantizing such a block changes it, so
    only the codes themselves give the file's function under int4."""
    if tname != "Q4_0":
        return G.quantize(tname, v)
    g = np.asarray(v, np.float32).reshape(-1, 32)
    n = len(g)
    d = G._h(g[np.arange(n), np.abs(g).argmax(1)] / -7)
    df = d.astype(np.float32)
    q = np.clip(np.rint(g / np.where(df == 0, 1, df)[:, None]) + 8, 0, 15).astype(np.uint8)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), q[:, :16] | (q[:, 16:] << 4)], 1).tobytes()


def check_q4_0_codes(build, tmp, label, model, kernels, failures, override=None):
    """--quantization int4 on a Q4_0 file runs its codes and scales as
    stored (no f32 step): llama_ref's W4A8 of the file's integers, within
    check_engine's int8 bounds, every kernel table and a chunked prefill
    bit-identical, the same greedy tokens (check_hfq.check_codes_int4)."""
    import check_hfq  # noqa: E402
    path = os.path.join(tmp, f"{label}-q4_0-7.gguf")
    raws = {}
    held = G.from_hf(model, path, "Q4_0", "F32", override, quant=q4_0_seven, raws=raws)
    deq = os.path.join(tmp, f"{label}-q4_0-7-dequantized")
    write_dequantized(model, held, deq, {g: hf for g, (hf, _) in raws.items()})
    c = json.load(open(os.path.join(model, "config.json")))
    H, KV = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    codes = {}
    for g, (hf, raw) in raws.items():
        t, _, shape = held[g]
        if t != "Q4_0" or not g.startswith("blk.") or len(shape) != 2:
            continue
        N, K = shape
        u, d = G.q4_0_codes(raw, N * K)
        u, d = u.reshape(N, K).astype(np.int64), d.reshape(N, K // 32)
        if g.endswith("attn_q.weight") or g.endswith("attn_k.weight"):  # llama.cpp's row order
            heads = H if g.endswith("attn_q.weight") else KV
            u, d = unpermute(u, heads), unpermute(d, heads)
        codes[hf] = (u, np.full((K // 32, N), 8), d.T, np.arange(K) // 32)
    tokens = "1,7,3,12,9,4,30,2,11,5"
    before = len(failures)
    exact, at, loose, runs, margin = check_hfq.check_codes_int4(
        build, tmp, label + "-q4_0-7", path, deq, codes, tokens, kernels, failures,
        ["--tokenizer", model])
    check_hfq.describes(build, path, f"checkpoint GGUF Q4_0 ({len(codes)} layer matrices' codes run "
                        "as stored by the int4 kernels", label + " as GGUF Q4_0", failures,
                        ["--tokenizer", model, "--quantization", "int4"])
    print(f"  {label + ' as GGUF Q4_0 (d = a / -7)':36s} int4 runs its {len(codes)} Q4_0 matrices' "
          f"codes: {exact:.1e} from W4A8 of them (to position {at}; {loose:.1e} after), {runs} "
          f"runs, {'bit-identical, greedy tokens equal' if len(failures) == before else 'FAILED'}")


# What GGUF cannot say, set in a copy of the family's checkpoint to what the
# GGUF loader assumes (llama.cpp's choices): Mistral's and Qwen 2's sliding
# windows are not in GGUF (llama.cpp attends to the whole context), nor Gemma's
# query_pre_attn_scalar (llama.cpp: the head size).
GGUF_EXPRESSIBLE = {"mistral": {"sliding_window": None}, "qwen2": {"use_sliding_window": False},
                    "gemma2": {"query_pre_attn_scalar": "head_dim"},
                    "gemma3": {"query_pre_attn_scalar": "head_dim"}}


def check_family(build, tmp, fam, src, failures):
    """A family's random checkpoint as GGUF (llama.cpp's layout for its
    architecture): logits and greedy tokens against the safetensors model.
    Llama 3.1's rope_freqs.weight and Phi-3's rope_factors hold the RoPE
    rescaling as f32 tensors (config.json: float64 numbers or equations), so
    there the logits are compared within 1e-5 instead of bit for bit."""
    model = os.path.join(tmp, f"fam-{fam}")
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(src, model)
    cfgp = os.path.join(model, "config.json")
    c = json.load(open(cfgp))
    for k, v in GGUF_EXPRESSIBLE.get(fam, {}).items():
        c[k] = c[v] if v == "head_dim" else v
    json.dump(c, open(cfgp, "w"), indent=1)
    path = os.path.join(tmp, f"fam-{fam}.gguf")
    G.from_hf(model, path, "F32", "F32")
    tokens = "1,7,3,12,9,4,30,2,11,5,40,41,42,43,44,45,46,47,48,49,50,51,52,53"
    a, b = logits(build, tmp, model, tokens, fam + "-st"), logits(build, tmp, path, tokens, fam + "-gguf")
    exact = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
    diff = float(np.abs(a - b).max() / np.abs(a).max()) if a.shape == b.shape else float("inf")
    ga, gb = greedy(build, model, tokens, model), greedy(build, path, tokens, model)
    rs = c.get("rope_scaling") or {}
    rope_freqs = rs.get("rope_type", rs.get("type")) in ("llama3", "longrope")
    if not (exact or (rope_freqs and diff < 1e-5)):
        failures.append(f"fam-{fam} as GGUF: logits differ from the safetensors model's ({diff:.1e})")
    if ga != gb:
        failures.append(f"fam-{fam} as GGUF: greedy tokens differ")
    print(f"  {'fam-' + fam + ' as GGUF (' + G.ARCH[c['architectures'][0]] + ')':36s} logits "
          f"{'bit-identical' if exact else f'within {diff:.1e}'}, greedy {len(gb)} tokens "
          f"{'equal' if ga == gb else 'DIFFER'} to the safetensors model")


def corrupt_cases(good):
    """(label, bytes, what the message must say) for a valid file good."""
    n_kv = struct.unpack_from("<Q", good, 16)[0]
    cases = [("bad magic", b"GGUX" + good[4:], "not a GGUF file"),
             ("version 1", good[:4] + struct.pack("<I", 1) + good[8:], "version 1"),
             ("empty", b"", "not a GGUF file"),
             ("absurd tensor count", good[:8] + struct.pack("<Q", 1 << 40) + good[16:], "do not fit"),
             ("absurd metadata count", good[:16] + struct.pack("<Q", n_kv + 10 ** 6) + good[24:],
              "do not fit")]
    for cut in (12, 30, 200, len(good) // 2, len(good) - 5):
        cases.append((f"truncated at {cut}", good[:cut], ("truncated", "do not fit", "outside the file")))
    return cases


def find_tensor_info(raw, name):
    """Offset of tensor name's info (its u64 name length) in raw."""
    key = struct.pack("<Q", len(name)) + name.encode()
    return raw.index(key)


def check_corrupt(build, tmp, model, failures):
    path = os.path.join(tmp, "good.gguf")
    G.from_hf(model, path, "F32", "F32")
    good = open(path, "rb").read()
    cases = corrupt_cases(good)
    at = find_tensor_info(good, "blk.0.attn_q.weight") + 8 + len("blk.0.attn_q.weight")
    nd = struct.unpack_from("<I", good, at)[0]
    t_at, o_at = at + 4 + 8 * nd, at + 4 + 8 * nd + 4

    def patched(off, fmt, v):
        b = bytearray(good)
        struct.pack_into(fmt, b, off, v)
        return bytes(b)
    cases += [("tensor offset past the end", patched(o_at, "<Q", 1 << 40), "outside the file"),
              ("tensor offset not aligned", patched(o_at, "<Q", 4), "not aligned"),
              ("overlapping tensors", patched(o_at, "<Q", 0), "overlap"),
              ("unknown tensor type", patched(t_at, "<I", 99), "blk.0.attn_q.weight' has type type 99"),
              ("unsupported tensor type", patched(t_at, "<I", 16), "has type IQ2_XXS"),
              ("absurd dimension", patched(at + 4, "<Q", 1 << 61), "absurd shape"),
              ("zero dimension", patched(at + 4, "<Q", 0), "absurd shape"),
              ("wrong shape", patched(at + 4, "<Q", 8), "shape")]
    bad = 0
    for label, raw, want in cases:
        p = os.path.join(tmp, "corrupt.gguf")
        open(p, "wb").write(raw)
        r = run([os.path.join(build, "inferd"), "generate", "--model", p, "--tokenizer", model,
                 "--prompt-ids", "1,2",
                 "--max-tokens", "2", "--output-ids", "--quiet"], ok=False)
        wants = want if isinstance(want, tuple) else (want,)
        if r.returncode != 1 or not any(w in r.stderr for w in wants):
            bad += 1
            failures.append(f"corrupt GGUF ({label}): exit {r.returncode}, {r.stderr.strip()!r} "
                            f"(expected exit 1 and {want!r})")
    print(f"  corrupt files: {len(cases) - bad} of {len(cases)} refused with the expected message")


def check_split(build, tmp, model, failures):
    """A model split as llama.cpp's gguf-split writes it (3 files; and with
    no tensor in the first) gives the one file's logits bit for bit and its
    greedy tokens, as f32 and with its Q4_0 codes under int4; broken splits
    are refused with a message naming the problem."""
    d = os.path.join(tmp, "split")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    tokens = "1,7,3,12,9,4,30,2,11,5"
    one, parts = os.path.join(d, "one.gguf"), {}
    G.from_hf(model, one, "Q4_0", "F32", {"token_embd.weight": "Q8_0"}, contents=parts)
    kvs, tensors = parts["kvs"], parts["tensors"]
    want = {q: logits(build, tmp, one, tokens, f"split-one-{q}", ["--quantization", q])
            for q in ("none", "int4")}
    want_ids = greedy(build, one, tokens, model, ["--quantization", "int4"])
    n_ok = 0
    for label, first_empty in (("3 files", False), ("3 files, none in the first", True)):
        first = G.write_gguf_split(os.path.join(d, "e" if first_empty else "m"), kvs, tensors, 3,
                                   first_empty)[0]
        ok = True
        for q, a in want.items():
            b = logits(build, tmp, first, tokens, f"split-{q}", ["--quantization", q])
            if not (a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))):
                ok = False
                failures.append(f"split GGUF ({label}): {q} logits differ from the one file's")
        if greedy(build, first, tokens, model, ["--quantization", "int4"]) != want_ids:
            ok = False
            failures.append(f"split GGUF ({label}): int4 greedy tokens differ from the one file's")
        n_ok += ok
    print(f"  split GGUF: {n_ok} of 2 splits (3 files; none in the first) give the one file's "
          f"logits (f32 and int4 codes) bit for bit and its greedy tokens")

    # broken splits: the 3 files' bytes, arranged or rewritten per case
    paths = G.split_paths(os.path.join(d, "m"), 3)
    names = [os.path.basename(p) for p in paths]
    raw = [open(p, "rb").read() for p in paths]

    def written(kv, ts):
        t = os.path.join(d, "piece.gguf")
        G.write_gguf(t, kv, ts)
        return open(t, "rb").read()
    per = -(-len(tensors) // 3)
    dup = written(G.split_keys(2, 3, len(tensors)), tensors)  # every tensor again
    miscount = written(list(kvs) + G.split_keys(0, 3, 5), tensors[:per])

    def case(label, files, load, want):
        b = os.path.join(d, "bad")
        shutil.rmtree(b, ignore_errors=True)
        os.makedirs(b)
        for name, data in files.items():
            open(os.path.join(b, name), "wb").write(data)
        r = run([os.path.join(build, "inferd"), "generate", "--model", os.path.join(b, load),
                 "--tokenizer", model, "--prompt-ids", "1,2", "--max-tokens", "2", "--quiet"], ok=False)
        if r.returncode != 1 or want not in r.stderr:
            failures.append(f"split GGUF ({label}): exit {r.returncode}, {r.stderr.strip()!r} "
                            f"(expected exit 1 and {want!r})")
            return 0
        return 1
    cases = [
        ("a file missing", {names[0]: raw[0], names[2]: raw[2]}, names[0], "split 2 of 3 is missing"),
        ("loaded from its second file", dict(zip(names, raw)), names[1],
         "load the model from its first file"),
        ("the first file renamed", {"model.gguf": raw[0], names[1]: raw[1], names[2]: raw[2]},
         "model.gguf", "does not end in -00001-of-00003.gguf"),
        ("two files swapped", {names[0]: raw[0], names[1]: raw[2], names[2]: raw[1]}, names[0],
         "says it is split 3 of 3, but is named as split 2 of 3"),
        ("a tensor in two files", {names[0]: raw[0], names[1]: raw[1], names[2]: dup}, names[0],
         "appears twice"),
        ("split.tensors.count wrong", {names[0]: miscount, names[1]: raw[1], names[2]: raw[2]},
         names[0], "split.tensors.count says 5 tensors"),
    ]
    good = sum(case(*c) for c in cases)
    print(f"  broken split GGUF: {good} of {len(cases)} refused with the expected message")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--peer", help="a llama.cpp source tree: also check gguf_ref against its gguf-py")
    a = ap.parse_args()
    tmp = os.path.join(a.build, "tmp", "gguf")
    os.makedirs(tmp, exist_ok=True)
    failures = []
    print("GGUF vs numpy (tests/ref/gguf_ref.py):")
    check_blocks(a.build, tmp, failures)
    if a.peer:
        check_peer(a.peer, failures)
    else:
        print("  not checked against llama.cpp's gguf-py here (no --peer tree)")
    fx = a.fixtures
    # rows of 256: every K-quant applies to every matrix
    k256 = os.path.join(fx, "k256")
    if not os.path.exists(os.path.join(k256, "config.json")):
        run([PY, MAKE_MODEL, k256, "--seed", "4", "--hidden", "256", "--intermediate", "512",
             "--heads", "4", "--kv-heads", "2", "--layers", "2"])
    bf16 = os.path.join(fx, "tiny-bf16-gguf")
    if not os.path.exists(os.path.join(bf16, "config.json")):
        run([PY, MAKE_MODEL, bf16, "--from", os.path.join(fx, "tiny"), "--dtype", "bf16"])
    f16 = os.path.join(fx, "wide-f16-gguf")
    if not os.path.exists(os.path.join(f16, "config.json")):
        run([PY, MAKE_MODEL, f16, "--from", os.path.join(fx, "wide"), "--dtype", "f16"])
    check_lossless(a.build, tmp, "tiny", os.path.join(fx, "tiny"), "F32", failures)
    check_lossless(a.build, tmp, "tiny-bf16", bf16, "BF16", failures)
    check_lossless(a.build, tmp, "wide-f16", f16, "F16", failures)
    stories = os.path.join(a.shared, "models", "stories260K")
    if os.path.isdir(stories):
        check_lossless(a.build, tmp, "stories260K", stories, "F32", failures)
    else:
        print(f"  skipped: {stories} not present")
    for t in QTYPES:
        check_quantized(a.build, tmp, "k256", k256, t, failures)
    # Q4_K_M-like: Q4_K matrices, Q6_K for v and down, Q8_0 embedding, F32 norms
    mix = {f"blk.{i}.{n}.weight": "Q6_K" for i in range(2) for n in ("attn_v", "ffn_down")}
    mix["token_embd.weight"] = "Q8_0"
    check_quantized(a.build, tmp, "k256", k256, "mix", failures, mix)
    # Q3_K_M-like: Q3_K matrices, Q5_0 and Q5_1 where llama.cpp falls back, Q4_1 for v
    mix3 = {f"blk.{i}.{n}.weight": t for i in range(2)
            for n, t in (("attn_v", "Q4_1"), ("ffn_down", "Q5_0"), ("attn_output", "Q5_1"),
                         ("ffn_up", "Q2_K"))}
    mix3["token_embd.weight"] = "Q6_K"
    check_quantized(a.build, tmp, "k256", k256, "mix3", failures, mix3)
    for fam in ("llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"):
        check_family(a.build, tmp, fam, os.path.join(fx, f"fam-{fam}"), failures)
    import check_engine as ce  # noqa: E402
    kernels = ce.supported_kernels(a.build, os.path.join(fx, "tiny"))
    # Q4_0 layer matrices as codes: a llama (q/k rows permuted in the file)
    # with two matrices of other types beside them, and Phi-3's fused linears
    check_q4_0_codes(a.build, tmp, "k256", k256, kernels, failures,
                     {"blk.0.attn_v.weight": "Q6_K", "blk.1.ffn_down.weight": "Q8_0"})
    check_q4_0_codes(a.build, tmp, "fam-phi3", os.path.join(fx, "fam-phi3"), kernels, failures)
    check_corrupt(a.build, tmp, os.path.join(fx, "tiny"), failures)
    check_split(a.build, tmp, os.path.join(fx, "tiny"), failures)
    check_f32_warning(a.build, tmp, os.path.join(tmp, "split", "one.gguf"), os.path.join(fx, "tiny"),
                      failures)
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
