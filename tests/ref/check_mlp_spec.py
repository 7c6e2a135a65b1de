#!/usr/bin/python3
"""inferd's MLP speculator (engine/spec_mlp.c, through build/mlp_spec_dump)
against the float64 numpy version of its equations (mlp_spec_ref.py), on
random speculators in the real checkpoint format: tied and untied, with and
without scale_input, inner_dim 0 or its own, with and without the
"speculator." prefix. And the loader's refusals: a mismatched vocabulary or
hidden size, a missing tensor, a wrong shape, another model type.

  check_mlp_spec.py [--build build]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mlp_spec_ref as ref  # noqa: E402

TOL = 1e-5
CASES = [  # name, vocab, emb_dim, inner_dim, n_predict, tie, scale_input, prefix
    ("untied", 97, 48, 32, 3, False, False, True),
    ("untied scale_input", 97, 48, 32, 4, False, True, True),
    ("tied", 131, 40, 24, 4, True, False, True),
    ("tied scale_input, inner 0, no prefix", 64, 24, 0, 3, True, True, False),
]


def dump(build, d, hidden, token, k, tmp, extra=()):
    hf, out = os.path.join(tmp, "h.f32"), os.path.join(tmp, "lg.f32")
    np.asarray(hidden, dtype="<f4").tofile(hf)
    r = subprocess.run([os.path.join(build, "mlp_spec_dump"), "--model", d, "--hidden", hf,
                        "--token", str(token), "--k", str(k), "--out", out] + list(extra),
                       capture_output=True, text=True)
    return r, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    failures = []
    print("MLP speculator vs float64 numpy reference:")
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, V, D, I, N, tie, si, prefix) in enumerate(CASES):
            d = os.path.join(tmp, f"s{i}")
            ref.make(d, V, D, I, N, tie, si, prefix, seed=10 + i)
            worst, same = 0.0, True
            for trial in range(3):
                h = rng.normal(0, 2.0, D).astype(np.float32)
                tok = int(rng.integers(0, V))
                want, want_toks = ref.run(d, h.astype(np.float64), tok, N)
                r, out = dump(a.build, d, h, tok, N, tmp)
                if r.returncode:
                    failures.append(f"{name}: mlp_spec_dump failed: {r.stderr.strip()}")
                    worst, same = float("nan"), False
                    break
                got = np.fromfile(out, dtype="<f4").reshape(N, V).astype(np.float64)
                worst = max(worst, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
                same &= [int(t) for t in r.stdout.split()] == want_toks
            print(f"  {name:40s} logits rel err {worst:.1e}  greedy tokens {'equal' if same else 'DIFFER'}")
            if not worst < TOL:
                failures.append(f"{name}: logits differ from the reference (rel err {worst:.2e})")
            if not same:
                failures.append(f"{name}: greedy proposals differ from the reference")
        # refusals, each with a message naming what is wrong
        d = os.path.join(tmp, "s0")
        h = np.zeros(48, dtype=np.float32)
        checks = [("vocabulary", d, ["--target-vocab", "96"], "97"),
                  ("hidden size", d, ["--target-hidden", "64"], "48")]
        bad = os.path.join(tmp, "missing")
        ref.make(bad, 97, 48, 32, 3, False, False, True, seed=1)
        t = ref.read_safetensors(os.path.join(bad, "model.safetensors"))
        del t["speculator.head.2.weight"]
        ref.write_safetensors(os.path.join(bad, "model.safetensors"), t)
        checks.append(("missing tensor", bad, [], "head.2.weight"))
        shape = os.path.join(tmp, "shape")
        ref.make(shape, 97, 48, 32, 3, False, False, True, seed=1)
        t = ref.read_safetensors(os.path.join(shape, "model.safetensors"))
        t["speculator.proj.1.weight"] = t["speculator.proj.1.weight"][:, :31]
        ref.write_safetensors(os.path.join(shape, "model.safetensors"), t)
        checks.append(("wrong shape", shape, [], "proj.1.weight"))
        other = os.path.join(tmp, "other")
        ref.make(other, 97, 48, 32, 3, False, False, True, seed=1)
        with open(os.path.join(other, "config.json")) as f:
            c = json.load(f)
        c["model_type"], c["architectures"] = "llama", ["LlamaForCausalLM"]
        with open(os.path.join(other, "config.json"), "w") as f:
            json.dump(c, f)
        checks.append(("not a speculator", other, [], "not an MLP speculator"))
        for what, dd, extra, needle in checks:
            r, _ = dump(a.build, dd, h, 0, 1, tmp, extra)
            ok = r.returncode == 1 and needle in r.stderr
            print(f"  refused: {what:31s} {'yes' if ok else 'NO'}  ({r.stderr.strip()})")
            if not ok:
                failures.append(f"{what}: not refused with a message naming {needle!r}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
