#!/usr/bin/python3
"""compressed-tensors W8A8 int8 (engine/hfq_ct.c), FP8 (engine/hfq_fp8.c)
and pack-quantized W4A16 / W8A16 (engine/hfq_pack.c) checkpoints against
numpy.

Test models are quantized and written as llm-compressor does (ct_ref.py:
int8 weights per channel or per tensor, scales in bf16 / f16 / f32, formats
int-quantized and naive-quantized, lm_head in ignore) and run by inferd with
no --quantization flag (the checkpoint's own scheme). Checks:

  * logits against ct_ref.W8A8, the scheme computed in float64 from its
    definition: within 1e-5 before the first position where an activation
    fell near a rounding boundary (the reference quantizes float64
    activations, the engine float32 ones, so from there one may round a step
    the other way) and within 5e-2 after, as check_engine's int8 bounds;
  * every kernel table and a chunked prefill give the same bits, and so does
    --quantization int8 (the same path);
  * greedy tokens equal the reference's (or part only after a near tie);
  * the weights' -128s (which llm-compressor's amax / 127.5 scales produce)
    occur, so the kernels' handling of them is exercised;
  * unsupported schemes and broken tensors are refused naming the field.

FP8 checkpoints (ct_ref.make_fp8: E4M3 weights rounded per channel or per
tensor with amax / 448 scales in bf16 / f16 / f32; FP8-dynamic, static
input_scale and weight-only configs; one whose layer-0 q_proj holds all 254
non-NaN codes) are dequantized at load, activations unquantized. Checks:

  * logits within check_engine's f32 bound (1e-4) of llama_ref on the
    weights ct_ref dequantizes with its own E4M3 decoder, greedy tokens
    equal;
  * the same bits as inferd on that dequantized f32 checkpoint, for every
    kernel table (so every code inferd decodes, all 254 in the all-codes
    case, equals numpy's decoding exactly), and with --quantization int8
    and int4 (requantized like any f32 checkpoint);
  * every kernel table and a chunked prefill give the same bits;
  * F8_E5M2 weights, NaN codes and other FP8 scheme variants are refused.

pack-quantized checkpoints (ct_ref.make_pack: numpy's own int32 packer and
min-max quantizer written from compressed-tensors' format: 4 and 8 bits,
channel and groups of 4 to 128, symmetric and with zero points packed or
stored as I8, actorder with a shuffled weight_g_idx, bf16 / f16 / f32
scales, Phi-3's fused linears, Qwen 2's biases, rows and inputs that leave
part of the last int32 padding, layers holding every code and zero point)
are dequantized at load like FP8 and checked the same way (llama_ref within
1e-4, bit-identical to the dequantized f32 checkpoint on every table and
with --quantization int8 / int4, chunked prefill, greedy tokens), plus: the
start-up line names the scheme; an I32 weight_shape, an all -1 g_idx
(compressed-tensors' uncalibrated value), an in-order g_idx and an all-zero
zero point in a symmetric file give the same bits; unsupported
configurations and broken tensors are refused with their messages.

  check_ct.py --build build --fixtures build/fixtures [--shared ../shared]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check_engine as ce  # noqa: E402
import check_hfq as hq  # noqa: E402
import ct_ref  # noqa: E402
import llama_ref  # noqa: E402

TOKENS = [1, 7, 3, 12, 9, 4, 30, 2, 11, 5, 17, 23, 8, 6, 40, 3]
GREEDY = 40


def reference(model, prompt):
    """(prompt logits [n, V], greedy ids, min margin, first near-tie position,
    static activations below -127.5 steps). Static activations are clamped
    at -127 as inferd does (vLLM: -128); the count says where that mattered."""
    m = ct_ref.W8A8(model, static_lo=-127)
    logits, ids, margin = llama_ref.generate(m, prompt, GREEDY, False)
    return logits, ids, margin, m.first_tie, m.clamped_low


def check_case(build, tmp, label, model, kernels, lows, failures, clamp=None):
    """clamp: for static input scales, whether activations must reach the
    clamp's low end (True) or stay inside it (False: vLLM's scheme exactly)."""
    want, ids, margin, tie, low = reference(model, TOKENS)
    if clamp is not None and (low > 0) != clamp:
        failures.append(f"{label}: {low} static activations below -127.5 steps (expected "
                        f"{'some' if clamp else 'none'})")
    tokens = ",".join(map(str, TOKENS))
    name = ce.slug(label)
    dumps = ce.dump_runs(build, tmp, name, model, tokens, kernels, (), (0, 3))
    explicit = ce.dump_runs(build, tmp, name + "-int8", model, tokens, kernels[:1], ["--quantization", "int8"])
    dumps["--quantization int8"] = next(iter(explicit.values()))
    rel = np.max([ce.rel_err(g, want) for g in ce.first_as_f64(dumps, want.shape)], axis=0)
    at, exact, loose = ce.tie_bounds(rel, tie, f"{label}: logits", "the reference", failures)
    ce.check_identical(dumps, label, "logits", failures)
    if lows == 0:
        failures.append(f"{label}: no weight is -128 (the check would not exercise it)")
    out = ce.run([os.path.join(build, "inferd"), "generate", "--model", model, "--prompt-ids", tokens,
                  "--max-tokens", str(GREEDY), "--ignore-eos", "--output-ids", "--quiet"])
    gen = [int(t) for t in out.split()]
    note = "equal"
    if gen != ids:
        k = next((i for i, (a, b) in enumerate(zip(gen, ids)) if a != b), min(len(gen), len(ids)))
        if tie is not None and tie <= len(TOKENS) - 1 + k:
            note = f"part at token {k}, after a near tie at position {tie} (allowed)"
        else:
            note = "DIFFER"
            failures.append(f"{label}: greedy tokens differ from the reference at token {k} "
                            f"(reference min margin {margin:.2e})")
    ties = f"from position {at} on {loose:.1e}" if at < len(rel) else "no near ties"
    clamped = f"; {low} activations clamped at -127" if clamp is not None else ""
    print(f"  {label:40s} logits rel err {exact:.1e} to position {at - 1}, {ties}; "
          f"{len(dumps)} runs identical; {lows} weights at -128; greedy {len(gen)} {note}{clamped}")


def refused(build, model, want, label, failures):
    r = subprocess.run([os.path.join(build, "dump_logits"), "--model", model, "--tokens", "1,2",
                        "--out", os.devnull], capture_output=True, text=True)
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"refusal {label}: exit {r.returncode}, {r.stderr.strip()!r} "
                        f"(expected {want!r})")


def refuse_edits(build, base, bad, w, cases, failures):
    """Each (label, edit, dtypes, message): base copied to bad with its
    tensors w edited (dtypes: safetensors dtypes to write some under, or
    None), refused with that message."""
    for label, edit, dtypes, want in cases:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(base, bad)
        t = dict(w)
        edit(t)
        ct_ref.write_st(os.path.join(bad, "model.safetensors"), t, dtypes)
        refused(build, bad, want, label, failures)


def edit_config(base, bad, edit):
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(base, bad)
    path = os.path.join(bad, "config.json")
    c = json.load(open(path))
    edit(c["quantization_config"], c["quantization_config"]["config_groups"]["group_0"])
    json.dump(c, open(path, "w"))


def refusals(build, tmp, base, failures):
    bad = os.path.join(tmp, "bad")
    cfg_cases = [
        ("float-quantized with int weights", lambda q, g: q.update(format="float-quantized"),
         "weights.type 'int' is not supported in an FP8 scheme"),
        ("W8A8 as pack-quantized", lambda q, g: q.update(format="pack-quantized"),
         "input_activations are not supported in a pack-quantized scheme"),
        ("unknown format", lambda q, g: q.update(format="marlin-24"), "format 'marlin-24' is not supported"),
        ("4-bit weights", lambda q, g: g["weights"].update(num_bits=4), "weights.num_bits 4 is not supported"),
        ("float weights", lambda q, g: g["weights"].update(type="float"), "weights.type 'float' is not supported"),
        ("zero points", lambda q, g: g["weights"].update(symmetric=False), "weights.symmetric false"),
        ("group strategy", lambda q, g: g["weights"].update(strategy="group", group_size=128),
         "weights.strategy 'group' is not supported"),
        ("static input scales without the tensors",
         lambda q, g: g["input_activations"].update(dynamic=False, strategy="tensor"),
         "static int8 checkpoint without tensor 'model.layers.0.self_attn.q_proj.input_scale'"),
        ("static per-token activations", lambda q, g: g["input_activations"].update(dynamic=False),
         "input_activations.strategy 'token' is not supported with dynamic false"),
        ("per-tensor dynamic activations", lambda q, g: g["input_activations"].update(strategy="tensor"),
         "input_activations.strategy 'tensor' is not supported with dynamic true"),
        ("asymmetric activations", lambda q, g: g["input_activations"].update(symmetric=False),
         "input_activations.symmetric false"),
        ("weight-only", lambda q, g: g.update(input_activations=None), "input_activations null"),
        ("kv cache scheme", lambda q, g: q.update(kv_cache_scheme={"num_bits": 8}), "kv_cache_scheme"),
        ("2:4 sparsity", lambda q, g: q.update(sparsity_config={"format": "sparse-24-bitmask"}),
         "sparsity_config format 'sparse-24-bitmask'"),
        ("no config_groups", lambda q, g: q.pop("config_groups"), "has no config_groups"),
    ]
    for label, edit, want in cfg_cases:
        edit_config(base, bad, edit)
        refused(build, bad, want, label, failures)
    # tensors: written anew from the base's
    st = os.path.join(base, "model.safetensors")
    w = ct_ref.read_raw(st)
    L = "model.layers.0.self_attn.q_proj."
    tensor_cases = [
        ("missing weight_scale", lambda t: t.pop(L + "weight_scale"),
         f"without tensor '{L}weight_scale'"),
        ("weight_scale shape", lambda t: t.update({L + "weight_scale": np.ones((3, 1), np.float32)}),
         f"'{L}weight_scale' must be"),
        ("nonzero zero point", lambda t: t.update({L + "weight_zero_point": np.ones((64, 1), np.int8)}),
         "nonzero zero point"),
        ("layer left in ignore", lambda t: t.update({
            "model.layers.1.mlp.down_proj.weight": np.zeros((64, 160), np.float32)}),
         "'model.layers.1.mlp.down_proj.weight' is f32 in a compressed-tensors int8 checkpoint"),
        ("int32 weights", lambda t: t.update({L + "weight": np.zeros((64, 64), np.int32)}),
         f"'{L}weight' has dtype I32"),
    ]
    refuse_edits(build, base, bad, w, [(lab, e, None, m) for lab, e, m in tensor_cases], failures)
    r = subprocess.run([os.path.join(build, "dump_logits"), "--model", base, "--tokens", "1,2",
                        "--out", os.devnull, "--quantization", "int4"], capture_output=True, text=True)
    if r.returncode == 0 or "runs with --quantization int8" not in r.stderr:
        failures.append(f"refusal int4: exit {r.returncode}, {r.stderr.strip()!r}")
    print(f"  refused: {len(cfg_cases)} unsupported configurations, {len(tensor_cases)} broken "
          f"checkpoints, --quantization int4")


def static_refusals(build, tmp, base, failures):
    """Broken input_scale tensors of a static checkpoint."""
    bad = os.path.join(tmp, "bad-static")
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    S = "model.layers.0.mlp.up_proj.input_scale"
    cases = [
        ("missing input_scale", lambda t: t.pop(S), f"without tensor '{S}'"),
        ("zero input_scale", lambda t: t.update({S: np.zeros(1, np.float32)}),
         f"{S} is 0; a static input scale is finite and positive"),
        ("negative input_scale", lambda t: t.update({S: np.full(1, -0.5, np.float32)}),
         f"{S} is -0.5; a static input scale is finite and positive"),
        ("infinite input_scale", lambda t: t.update({S: np.full(1, np.inf, np.float32)}),
         f"{S} is inf"),
        ("two input_scale values", lambda t: t.update({S: np.ones(2, np.float32)}),
         f"'{S}' must be one F32, BF16 or F16 value"),
    ]
    refuse_edits(build, base, bad, w, [(lab, e, None, m) for lab, e, m in cases], failures)
    print(f"  refused: {len(cases)} broken input scales")


def check_rows_int8(build, tmp, name, model, rows, kernels, failures):
    """--quantization int8 on a W8A16 checkpoint per channel and symmetric,
    which runs its int8 rows as stored: against ct_ref.W8A8 on a W8A8 twin
    written with the same integers and scales (rows: make_pack's ints),
    every table and a chunked prefill identical, and the twin's own bits."""
    twin = model + "-w8a8"
    t = ct_ref.read_raw(os.path.join(model, "model.safetensors"))
    for lin, (q, _, sc, _) in rows.items():
        p = lin[:-len("weight")]
        for part in ("weight_packed", "weight_shape", "weight_zero_point"):
            t.pop(p + part, None)
        t[lin] = q.astype(np.int8)
        t[p + "weight_scale"] = sc.T.astype(np.float32)  # exact: the stored scales
    ct_ref.write_beside(model, twin, t, ct_ref.scheme())
    ref = ct_ref.W8A8(twin)
    want, _, _ = llama_ref.generate(ref, TOKENS, 0, False)
    tokens = ",".join(map(str, TOKENS))
    dumps = ce.dump_runs(build, tmp, name + "-rows", model, tokens, kernels,
                         ["--quantization", "int8"], (0, 3))
    rel = np.max([ce.rel_err(g, want) for g in ce.first_as_f64(dumps, want.shape)], axis=0)
    at, exact, _ = ce.tie_bounds(rel, ref.first_tie, f"{name}: int8 logits",
                                 "W8A8 of the checkpoint's rows", failures)
    ce.check_identical(dumps, name, "int8 logits", failures)
    mine = ce.dump_runs(build, tmp, name + "-twin", twin, tokens, kernels[:1])
    if next(iter(mine.values())) != dumps[next(iter(mine))]:
        failures.append(f"{name}: --quantization int8 is not bit-identical to the W8A8 twin")
    return exact, at, len(dumps)


def check_dequant(build, tmp, label, model, kernels, failures, codes=None, rows=None):
    """An FP8 or pack-quantized checkpoint at model (its dequantized f32 twin
    at model-f32). codes: a W4A16 checkpoint's integers (ct_ref.make_pack's
    ints) when --quantization int4 runs them as stored, checked as
    check_hfq checks GPTQ's; else int4 requantizes the twin's weights.
    rows: a W8A16 one's when --quantization int8 runs them as stored."""
    deq = model + "-f32"
    ref = llama_ref.Llama(deq)
    want, ids, margin = llama_ref.generate(ref, TOKENS, GREEDY, False)
    tokens = ",".join(map(str, TOKENS))
    name = ce.slug(label)
    dumps = ce.dump_runs(build, tmp, name, model, tokens, kernels, (), (0, 3))
    rel = max(float(ce.rel_err(g, want).max()) for g in ce.first_as_f64(dumps, want.shape))
    if not rel <= ce.TOL:
        failures.append(f"{label}: logits differ from llama_ref on the dequantized weights by "
                        f"{rel:.2e} (> {ce.TOL})")
    ce.check_identical(dumps, label, "logits", failures)
    twin = ce.dump_runs(build, tmp, name + "-f32", deq, tokens, kernels)
    same = sum(twin[k] == dumps[k] for k in twin)
    if same != len(twin):
        failures.append(f"{label}: logits are not bit-identical to the dequantized f32 checkpoint's "
                        f"({same} of {len(twin)} kernel tables are)")
    qsame, as_stored = [], ""
    if codes is not None:
        exact, at, loose, runs, _ = hq.check_codes_int4(build, tmp, name, model, deq, codes,
                                                         ",".join(map(str, TOKENS)), kernels,
                                                         failures)
        as_stored = (f"; int4 runs the codes as stored: {exact:.1e} from W4A8 of them to position "
                     f"{at - 1}, {runs} runs identical")
    if rows is not None:
        exact, at, runs = check_rows_int8(build, tmp, name, model, rows, kernels, failures)
        as_stored += (f"; int8 runs the rows as stored: {exact:.1e} from W8A8 of them to "
                      f"position {at - 1}, {runs} runs identical")
    for q in ([] if rows is not None else ["int8"]) + ([] if codes is not None else ["int4"]):
        a = ce.dump_runs(build, tmp, name + "-" + q, model, tokens, kernels[:1], ["--quantization", q])
        b = ce.dump_runs(build, tmp, name + "-f32-" + q, deq, tokens, kernels[:1], ["--quantization", q])
        if a == b:
            qsame.append(q)
        else:
            failures.append(f"{label}: --quantization {q} logits differ from the dequantized f32 "
                            f"checkpoint's with --quantization {q}")
        if label.startswith("fp8"):  # the start-up line says what the weights became
            hq.describes(build, model, f"then requantized to {q}; activations int8 per token",
                         label, failures, ["--quantization", q])
    out = ce.run([os.path.join(build, "inferd"), "generate", "--model", model, "--prompt-ids", tokens,
                  "--max-tokens", str(GREEDY), "--ignore-eos", "--output-ids", "--quiet"])
    gen = [int(t) for t in out.split()]
    if gen != ids:
        failures.append(f"{label}: greedy tokens differ from the reference (min margin {margin:.2e})")
    print(f"  {label:40s} logits rel err {rel:.1e}; {len(dumps)} runs identical; bit-identical to the "
          f"dequantized f32 checkpoint in {same}/{len(twin)} tables and with --quantization "
          f"{' and '.join(qsame) or 'NEITHER'}; greedy {len(gen)} {'equal' if gen == ids else 'DIFFER'}"
          f"{as_stored}")


def fp8m_refusals(build, tmp, base, failures):
    """quant_method fp8 (base: blocks of 32 x 32 on tiny) broken one way each."""
    bad = os.path.join(tmp, "bad-fp8m")
    cfg_cases = [
        ("fp8 fmt e5m2", lambda q: q.update(fmt="e5m2"), "fmt 'e5m2' is not supported (e4m3)"),
        ("fp8 activation scheme", lambda q: q.update(activation_scheme="per-group"),
         "activation_scheme 'per-group' is not supported (dynamic, static)"),
        ("fp8 3-d blocks", lambda q: q.update(weight_block_size=[32, 32, 1]),
         "weight_block_size must be two integers in 1..65536"),
        ("fp8 zero block", lambda q: q.update(weight_block_size=[0, 32]),
         "weight_block_size must be two integers in 1..65536"),
        ("fp8 blocks of another size", lambda q: q.update(weight_block_size=[64, 32]),
         "weight_scale_inv' must be F32, BF16 or F16 [1, 2]"),
    ]
    for label, edit, want in cfg_cases:
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(base, bad)
        path = os.path.join(bad, "config.json")
        c = json.load(open(path))
        edit(c["quantization_config"])
        json.dump(c, open(path, "w"))
        refused(build, bad, want, label, failures)
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    L = "model.layers.0.self_attn.q_proj."

    def nan(t):
        q = t[L + "weight"].copy()
        q[3, 5] = 0xFF
        t[L + "weight"] = q
    tensor_cases = [
        ("fp8 E5M2 weights", lambda t: None, {L + "weight": "F8_E5M2"}, f"'{L}weight' has dtype F8_E5M2"),
        ("fp8 NaN code", nan, None, f"{L}weight[3][5] is an FP8 NaN (0xFF)"),
        ("fp8 missing scale_inv", lambda t: t.pop(L + "weight_scale_inv"), None,
         f"without tensor '{L}weight_scale_inv'"),
        ("fp8 infinite scale", lambda t: t.update({L + "weight_scale_inv": np.full((2, 2), np.inf, np.float32)}),
         None, f"{L}weight_scale_inv[0] is not finite"),
    ]
    refuse_edits(build, base, bad, w, tensor_cases, failures)
    print(f"  refused: {len(cfg_cases)} unsupported fp8 configurations, {len(tensor_cases)} broken "
          f"fp8 checkpoints")


def fp8_refusals(build, tmp, base, failures):
    bad = os.path.join(tmp, "bad-fp8")
    cfg_cases = [
        ("FP8 4-bit float weights", lambda q, g: g["weights"].update(num_bits=4),
         "weights.num_bits 4 is not supported with type float"),
        ("FP8 asymmetric weights", lambda q, g: g["weights"].update(symmetric=False),
         "weights.symmetric false is not supported (zero points; symmetric FP8 only)"),
        ("FP8 asymmetric activations", lambda q, g: g["input_activations"].update(symmetric=False),
         "input_activations.symmetric false"),
        ("FP8 block strategy", lambda q, g: g["weights"].update(strategy="block", block_structure=[128, 128]),
         "weights.strategy 'block' is not supported in an FP8 scheme"),
        ("FP8 dynamic weights", lambda q, g: g["weights"].update(dynamic=True), "weights.dynamic must be false"),
        ("float-quantized with int weights", lambda q, g: g["weights"].update(type="int"),
         "weights.type 'int' is not supported in an FP8 scheme"),
        ("FP8 weights, int8 activations", lambda q, g: g["input_activations"].update(type="int"),
         "input_activations.type 'int' is not supported in an FP8 scheme"),
        ("FP8 static per-token activations", lambda q, g: g["input_activations"].update(dynamic=False),
         "input_activations.strategy 'token' with dynamic false"),
        ("FP8 kv cache scheme", lambda q, g: q.update(kv_cache_scheme={"num_bits": 8, "type": "float"}),
         "kv_cache_scheme"),
        ("int8 and FP8 groups", lambda q, g: q["config_groups"].update(
            group_1=dict(ct_ref.scheme()["config_groups"]["group_0"], format="int-quantized")),
         "config_groups mix FP8 and int8 schemes"),
    ]
    for label, edit, want in cfg_cases:
        edit_config(base, bad, edit)
        refused(build, bad, want, label, failures)
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    L = "model.layers.0.self_attn.q_proj."

    def nan(code):
        def edit(t):
            q = t[L + "weight"].copy()
            q[3, 5] = code
            t[L + "weight"] = q
        return edit
    tensor_cases = [  # label, edit, dtypes override, message
        ("F8_E5M2 weights", lambda t: None, {L + "weight": "F8_E5M2"}, f"'{L}weight' has dtype F8_E5M2"),
        ("NaN code 0x7F", nan(0x7F), None, f"{L}weight[3][5] is an FP8 NaN (0x7F)"),
        ("NaN code 0xFF", nan(0xFF), None, f"{L}weight[3][5] is an FP8 NaN (0xFF)"),
        ("I8 weights", lambda t: t.update({L + "weight": t[L + "weight"].view(np.int8)}), None,
         f"'{L}weight' has dtype I8; a compressed-tensors FP8"),
        ("missing weight_scale", lambda t: t.pop(L + "weight_scale"), None, f"without tensor '{L}weight_scale'"),
        ("infinite scale", lambda t: t.update({L + "weight_scale": np.full((64, 1), np.inf, np.float32)}),
         None, f"{L}weight_scale[0] is not finite"),
    ]
    refuse_edits(build, base, bad, w, tensor_cases, failures)
    print(f"  refused: {len(cfg_cases)} unsupported FP8 configurations, {len(tensor_cases)} broken "
          f"FP8 checkpoints (F8_E5M2, NaN codes, ...)")


def pack_variants(build, tmp, base, failures):
    """Files that differ from base (W4A16 symmetric, group 32, no g_idx) only
    in how they store the same function: the same bits."""
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    want = ce.dump_runs(build, tmp, "pack-variant-base", base, "1,7,3,12,9", ["generic"])
    linears = [n[:-len("weight_packed")] for n in w if n.endswith("weight_packed")]

    def each(part, make):
        def edit(t):
            for p in linears:
                t[p + part] = make(t[p + "weight_shape"])
        return edit
    variants = [
        ("I32 weight_shape", each("weight_shape", lambda s: s.astype(np.int32))),
        ("g_idx all -1 (uncalibrated)", each("weight_g_idx", lambda s: np.full(s[1], -1, np.int32))),
        ("g_idx in order", each("weight_g_idx", lambda s: (np.arange(s[1]) // 32).astype(np.int32))),
        ("all-zero zero points", each("weight_zero_point", lambda s: np.zeros((s[0] // 8, s[1] // 32), np.int32))),
    ]
    alt = os.path.join(tmp, "pack-variant")
    for label, edit in variants:
        shutil.rmtree(alt, ignore_errors=True)
        shutil.copytree(base, alt)
        t = dict(w)
        edit(t)
        ct_ref.write_st(os.path.join(alt, "model.safetensors"), t)
        r = subprocess.run([os.path.join(build, "dump_logits"), "--model", alt, "--tokens", "1,7,3,12,9",
                            "--out", os.path.join(tmp, "pack-variant.f32"), "--kernels", "generic"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            failures.append(f"pack variant {label}: refused: {r.stderr.strip()!r}")
        elif open(os.path.join(tmp, "pack-variant.f32"), "rb").read() != next(iter(want.values())):
            failures.append(f"pack variant {label}: logits differ from the same checkpoint without it")
    print(f"  accepted, the same bits: {', '.join(v[0] for v in variants)}")


def pack_refusals(build, tmp, base, failures):
    """base: W4A16 asymmetric, group 32, packed zero points, on tiny."""
    bad = os.path.join(tmp, "bad-pack")
    int8_group = dict(ct_ref.scheme()["config_groups"]["group_0"], format="int-quantized")
    cfg_cases = [
        ("2-bit weights", lambda q, g: g["weights"].update(num_bits=2),
         "weights.num_bits 2 is not supported in a pack-quantized scheme (4, 8)"),
        ("float weights", lambda q, g: g["weights"].update(type="float"),
         "weights.type 'float' is not supported in a pack-quantized scheme (int)"),
        ("tensor strategy", lambda q, g: g["weights"].update(strategy="tensor", group_size=None),
         "weights.strategy 'tensor' is not supported in a pack-quantized scheme (channel, group)"),
        ("block strategy", lambda q, g: g["weights"].update(strategy="block", block_structure=[32, 32]),
         "weights.strategy 'block' is not supported in a pack-quantized scheme"),
        ("no strategy, no group_size", lambda q, g: g["weights"].update(strategy=None, group_size=None),
         "weights.strategy 'tensor' is not supported in a pack-quantized scheme"),
        ("W4A8 (int8 activations)", lambda q, g: g.update(
            input_activations=ct_ref.scheme()["config_groups"]["group_0"]["input_activations"]),
         "input_activations are not supported in a pack-quantized scheme (null: weight-only"),
        ("dynamic weights", lambda q, g: g["weights"].update(dynamic=True), "weights.dynamic must be false"),
        ("group without group_size", lambda q, g: g["weights"].update(group_size=None),
         "weights.group_size must be a positive integer with strategy group"),
        ("channel with group_size", lambda q, g: g["weights"].update(strategy="channel", group_size=32),
         "weights.group_size must be null or -1 with strategy channel"),
        ("symmetric not a boolean", lambda q, g: g["weights"].update(symmetric="yes"),
         "weights.symmetric is not a boolean"),
        ("unknown actorder", lambda q, g: g["weights"].update(actorder="random"),
         "weights.actorder 'random' is not supported (group, weight, null)"),
        ("actorder on channel", lambda q, g: g["weights"].update(strategy="channel", group_size=None,
                                                                 actorder="group"),
         "weights.actorder 'group' needs strategy group"),
        ("group_size not dividing K", lambda q, g: g["weights"].update(group_size=48),
         "has 64 inputs, not a multiple of group_size 48"),
        ("groups of two widths", lambda q, g: q["config_groups"].update(
            group_1=dict(g, weights=dict(g["weights"], num_bits=8))),
         "config_groups.group_1.weights differ from config_groups.group_0's"),
        ("pack-quantized and int8 groups", lambda q, g: q["config_groups"].update(group_1=int8_group),
         "config_groups mix pack-quantized and int8 schemes"),
        ("kv cache scheme", lambda q, g: q.update(kv_cache_scheme={"num_bits": 8, "type": "int"}),
         "kv_cache_scheme"),
        ("2:4 sparsity", lambda q, g: q.update(sparsity_config={"format": "sparse-24-bitmask"}),
         "sparsity_config format 'sparse-24-bitmask'"),
        ("actorder group without g_idx", lambda q, g: g["weights"].update(actorder="group"),
         "without tensor 'model.layers.0.self_attn.q_proj.weight_g_idx'"),
        ("symmetric with zero points stored", lambda q, g: g["weights"].update(symmetric=True),
         "holds a nonzero zero point in a symmetric scheme"),
    ]
    for label, edit, want in cfg_cases:
        edit_config(base, bad, edit)
        refused(build, bad, want, label, failures)
    w = ct_ref.read_raw(os.path.join(base, "model.safetensors"))
    L = "model.layers.0.self_attn.q_proj."
    zp8 = np.zeros((64, 2), np.int8)
    zp8[3, 1] = 8

    def gidx(v):
        return lambda t: t.update({L + "weight_g_idx": np.array(v, np.int32)})
    tensor_cases = [
        ("missing weight_packed", lambda t: t.pop(L + "weight_packed"), f"without tensor '{L}weight_packed'"),
        ("missing weight_shape", lambda t: t.pop(L + "weight_shape"), f"without tensor '{L}weight_shape'"),
        ("missing weight_scale", lambda t: t.pop(L + "weight_scale"), f"without tensor '{L}weight_scale'"),
        ("missing zero point", lambda t: t.pop(L + "weight_zero_point"),
         f"without tensor '{L}weight_zero_point'"),
        ("weight_packed misshapen", lambda t: t.update({L + "weight_packed": t[L + "weight_packed"][:, :7]}),
         f"'{L}weight_packed' must be I32 [64, 8] (4-bit values of [64, 64], 8 per int32)"),
        ("weight_packed as I8", lambda t: t.update({L + "weight_packed": np.zeros((64, 8), np.int8)}),
         f"'{L}weight_packed' must be I32 [64, 8]"),
        ("weight_shape values", lambda t: t.update({L + "weight_shape": np.array([64, 60], np.int64)}),
         f"'{L}weight_shape' is [64, 60]; config.json makes this linear [64, 64]"),
        ("weight_shape float", lambda t: t.update({L + "weight_shape": np.array([64, 64], np.float32)}),
         f"'{L}weight_shape' must be I64 or I32 [2]"),
        ("weight_scale per channel in a group scheme",
         lambda t: t.update({L + "weight_scale": np.ones((64, 1), np.float32)}),
         f"'{L}weight_scale' must be F32, BF16 or F16 [64, 2]"),
        ("infinite scale", lambda t: t.update({L + "weight_scale": np.full((64, 2), np.inf, np.float32)}),
         f"{L}weight_scale[0][0] is not finite"),
        ("zero point misshapen", lambda t: t.update({L + "weight_zero_point": np.zeros((64, 2), np.int32)}),
         f"'{L}weight_zero_point' must be I32 [8, 2] (packed along the rows) or I8 [64, 2]"),
        ("I8 zero point out of range", lambda t: t.update({L + "weight_zero_point": zp8}),
         f"{L}weight_zero_point[3][1] is 8, outside -8..7 (4 bits)"),
        ("g_idx out of range", gidx([0] * 31 + [2] + [1] * 32), f"{L}weight_g_idx[31] is 2, outside 0..1"),
        ("g_idx negative", gidx([0] * 32 + [1] * 31 + [-1]), f"{L}weight_g_idx[63] is -1, outside 0..1"),
        ("g_idx groups uneven", gidx([0] * 33 + [1] * 31), f"{L}weight_g_idx puts 33 inputs in group 0; "
         "each group holds group_size 32"),
        ("g_idx misshapen", gidx([0] * 32), f"'{L}weight_g_idx' must be I32 [64]"),
        ("I8 weights as P.weight", lambda t: t.update({L + "weight": np.zeros((64, 64), np.int8)}),
         f"'{L}weight' has dtype I8; a compressed-tensors pack-quantized checkpoint's linears are"),
    ]
    refuse_edits(build, base, bad, w, [(lab, e, None, m) for lab, e, m in tensor_cases], failures)
    print(f"  refused: {len(cfg_cases)} unsupported pack-quantized configurations, {len(tensor_cases)} "
          f"broken pack-quantized checkpoints")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    a = ap.parse_args()
    tmp = os.path.join(a.build, "tmp", "ct")
    os.makedirs(tmp, exist_ok=True)
    failures = []
    fx = a.fixtures
    untied = os.path.join(tmp, "src-tiny-untied")
    if not os.path.isdir(untied):
        ce.run([sys.executable, ce.MAKE_MODEL, untied, "--seed", "2", "--untied", "--dtype", "bf16"])
    kernels = ce.supported_kernels(a.build, os.path.join(fx, "tiny"))
    cases = [  # label, source, strategy, scale dtype, format
        ("tiny channel bf16 scales", os.path.join(fx, "tiny"), "channel", "bf16", "int-quantized"),
        ("tiny tensor f32 scale", os.path.join(fx, "tiny"), "tensor", "f32", "int-quantized"),
        ("tiny bf16 untied, lm_head ignored", untied, "channel", "bf16", "int-quantized"),
        ("wide channel f16 naive-quantized", os.path.join(fx, "wide"), "channel", "f16", "naive-quantized"),
        ("phi3 fused qkv/gate_up channel", os.path.join(fx, "fam-phi3"), "channel", "bf16", "int-quantized"),
        ("phi3 fused tensor", os.path.join(fx, "fam-phi3"), "tensor", "f32", "int-quantized"),
        ("qwen2 biases channel f32", os.path.join(fx, "fam-qwen2"), "channel", "f32", "int-quantized"),
    ]
    real = os.path.join(a.shared, "models", "stories260K")
    if os.path.isdir(real):
        cases.append(("stories260K channel bf16", real, "channel", "bf16", "int-quantized"))
    else:
        print(f"  skipped: {real} not present (real-weights case not run)")
    print("compressed-tensors W8A8 int8 vs numpy:")
    for label, src, strategy, sdt, fmt in cases:
        out = os.path.join(tmp, ce.slug(label))
        shutil.rmtree(out, ignore_errors=True)
        _, lows = ct_ref.make(src, out, strategy, sdt, fmt)
        check_case(a.build, tmp, label, out, kernels, lows, failures)
    refusals(a.build, tmp, os.path.join(tmp, ce.slug(cases[0][0])), failures)
    static = [  # label, source, strategy, scale dtype, margin over the calibrated amax, clamped
        ("static tiny channel bf16 scales", os.path.join(fx, "tiny"), "channel", "bf16", 1.5, False),
        ("static tiny tensor f32, clamped", os.path.join(fx, "tiny"), "tensor", "f32", 0.5, True),
        ("static phi3 fused qkv/gate_up f16", os.path.join(fx, "fam-phi3"), "channel", "f16", 1.5,
         False),
        ("static qwen2 biases bf16", os.path.join(fx, "fam-qwen2"), "channel", "bf16", 1.5, False),
    ]
    if os.path.isdir(real):
        static.append(("static stories260K channel bf16, clamped", real, "channel", "bf16", 1.25,
                       True))
    print("compressed-tensors W8A8 int8, static input scales, vs numpy:")
    for label, src, strategy, sdt, margin, clamp in static:
        out = os.path.join(tmp, ce.slug(label))
        shutil.rmtree(out, ignore_errors=True)
        _, lows = ct_ref.make(src, out, strategy, sdt, "int-quantized", "static", margin)
        check_case(a.build, tmp, label, out, kernels, lows, failures, clamp)
    static_refusals(a.build, tmp, os.path.join(tmp, ce.slug(static[0][0])), failures)
    fp8 = [  # label, source, strategy, scale dtype, activations, format, all codes
        ("fp8 tiny channel bf16, dynamic", os.path.join(fx, "tiny"), "channel", "bf16", "dynamic",
         "float-quantized", False),
        ("fp8 tiny tensor f32, static input_scale", os.path.join(fx, "tiny"), "tensor", "f32", "static",
         "float-quantized", False),
        ("fp8 tiny channel f16, weight-only naive", os.path.join(fx, "tiny"), "channel", "f16", "none",
         "naive-quantized", False),
        ("fp8 tiny all 254 codes in q_proj", os.path.join(fx, "tiny"), "channel", "f32", "dynamic",
         "float-quantized", True),
        ("fp8 phi3 fused channel bf16 static", os.path.join(fx, "fam-phi3"), "channel", "bf16", "static",
         "float-quantized", False),
        ("fp8 qwen2 biases tensor bf16", os.path.join(fx, "fam-qwen2"), "tensor", "bf16", "dynamic",
         "float-quantized", False),
    ]
    if os.path.isdir(real):
        fp8.append(("fp8 stories260K channel bf16", real, "channel", "bf16", "dynamic", "float-quantized",
                    False))
    print("compressed-tensors FP8 (dequantized to f32) vs numpy:")
    for label, src, strategy, sdt, acts, fmt, codes in fp8:
        out = os.path.join(tmp, ce.slug(label))
        for d in (out, out + "-f32"):
            shutil.rmtree(d, ignore_errors=True)
        ct_ref.make_fp8(src, out, strategy, sdt, acts, fmt, codes)
        check_dequant(a.build, tmp, label, out, kernels, failures)
    fp8_refusals(a.build, tmp, os.path.join(tmp, ce.slug(fp8[0][0])), failures)
    fp8m = [  # label, source, weight_block_size (None: per tensor), scale dtype, activations
        ("fp8m tiny blocks 32x32 f32", os.path.join(fx, "tiny"), (32, 32), "f32", "dynamic"),
        ("fp8m wide blocks 128x128 bf16", os.path.join(fx, "wide"), (128, 128), "bf16", "dynamic"),
        ("fp8m tiny blocks 16x48 f32 static", os.path.join(fx, "tiny"), (16, 48), "f32", "static"),
        ("fp8m tiny per tensor f32 static", os.path.join(fx, "tiny"), None, "f32", "static"),
        ("fp8m phi3 fused blocks 32x32", os.path.join(fx, "fam-phi3"), (32, 32), "f32", "dynamic"),
    ]
    print("quant_method fp8 (vLLM's, DeepSeek's blocks; dequantized to f32) vs numpy:")
    for label, src, block, sdt, acts in fp8m:
        out = os.path.join(tmp, ce.slug(label))
        for d in (out, out + "-f32"):
            shutil.rmtree(d, ignore_errors=True)
        ct_ref.make_fp8m(src, out, block, sdt, acts)
        check_dequant(a.build, tmp, label, out, kernels, failures)
    fp8m_refusals(a.build, tmp, os.path.join(tmp, ce.slug(fp8m[0][0])), failures)
    g128 = os.path.join(tmp, "src-g128")
    if not os.path.isdir(g128):  # every K a multiple of 128: W4A16's default group
        ce.run([sys.executable, ce.MAKE_MODEL, g128, "--seed", "3", "--hidden", "128", "--intermediate",
                "384", "--heads", "8", "--kv-heads", "2"])
    tiny = os.path.join(fx, "tiny")
    pack = [  # label, source, bits, group (0: channel), symmetric, scale dtype, actorder, zero form, all codes
        ("w4a16 tiny group 32 bf16", tiny, 4, 32, True, "bf16", False, "packed", False),
        ("w4a16 group 128 f16", g128, 4, 128, True, "f16", False, "packed", False),
        ("w4a16 tiny channel f32", tiny, 4, 0, True, "f32", False, "packed", False),
        ("w4a16 asym tiny group 32 bf16 all codes", tiny, 4, 32, False, "bf16", False, "packed", True),
        ("w4a16 asym wide group 40 I8 zero points", os.path.join(fx, "wide"), 4, 40, False, "f16", False,
         "i8", False),
        ("w4a16 actorder tiny group 32 bf16", tiny, 4, 32, True, "bf16", True, "packed", False),
        ("w8a16 tiny channel bf16", tiny, 8, 0, True, "bf16", False, "packed", False),
        ("w8a16 asym actorder group 32 f16 all codes", tiny, 8, 32, False, "f16", True, "packed", True),
        ("w4a16 asym actorder phi3 fused group 32", os.path.join(fx, "fam-phi3"), 4, 32, False, "bf16", True,
         "packed", False),
        ("w4a16 asym qwen2 biases group 32 f16", os.path.join(fx, "fam-qwen2"), 4, 32, False, "f16", False,
         "packed", False),
    ]
    if os.path.isdir(real):  # 172 inputs and rows: the last int32 of a row or zero column half padding
        pack += [("w4a16 asym stories260K group 4 bf16", real, 4, 4, False, "bf16", False, "packed", False),
                 ("w8a16 stories260K channel f32", real, 8, 0, True, "f32", False, "packed", False)]
    print("compressed-tensors pack-quantized W4A16 / W8A16 (dequantized to f32) vs numpy:")
    for label, src, bits, group, sym, sdt, act, zf, codes in pack:
        out = os.path.join(tmp, ce.slug(label))
        for d in (out, out + "-f32"):
            shutil.rmtree(d, ignore_errors=True)
        ints = {}
        ct_ref.make_pack(src, out, bits, group, sym, sdt, act, zf, codes, ints=ints)
        # the int4 kernels take the codes: 4 bits, f16-exact scales, whole 32s once sorted by group
        fits = bits == 4 and sdt != "f32" and all(hq.codes_fit(c[3]) for c in ints.values())
        rows = bits == 8 and group == 0 and sym  # int8 rows and a scale each: the int8 kernels'
        check_dequant(a.build, tmp, label, out, kernels, failures, ints if fits else None,
                      ints if rows else None)
        hq.describes(a.build, out, f"compressed-tensors W{bits}A16 (dequantized to f32 at load; "
                     "activations not quantized)", label, failures)
        stored = ("compressed-tensors W4A16 (codes, scales and zeros as stored" +
                  (", inputs sorted by group" if act else ";"))
        other = ("int8", "int4")[bits == 8]  # the width the scheme is not: through f32
        hq.describes(a.build, out, f"compressed-tensors W{bits}A16 (dequantized to f32, then "
                     f"requantized to {other}; activations int8 per token)", label, failures,
                     ["--quantization", other])
        if bits == 4:
            hq.describes(a.build, out, stored if fits else
                         "compressed-tensors W4A16 (not storable as int4 codes", label,
                         failures, ["--quantization", "int4"])
        else:
            hq.describes(a.build, out, "compressed-tensors W8A16 (int8 weights and scales as stored"
                         if rows else "compressed-tensors W8A16 (not storable as int8 rows", label,
                         failures, ["--quantization", "int8"])
    pack_variants(a.build, tmp, os.path.join(tmp, ce.slug(pack[0][0])), failures)
    pack_refusals(a.build, tmp, os.path.join(tmp, ce.slug(pack[3][0])), failures)
    if failures:
        print("FAILED:")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
