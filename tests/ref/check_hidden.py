#!/usr/bin/python3
"""The backend's final hidden states (be_batch.want_hidden: after the final
RMSNorm, the LM head's input, what an MLP speculator reads) against the
float64 numpy reference (tests/ref/llama_ref.py --hidden), on the project's
own tiny models: every position, fed whole and in chunks of 7 (the chunked
dump must be bit-identical to the whole one: batch invariance).

  check_hidden.py [--build build] [--fixtures build/fixtures]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-5  # relative error, as the logits check (float32 engine, float64 reference)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def check(build, tmp, name, model, tokens, failures):
    ids = ",".join(str(t) for t in tokens)
    ref_path = os.path.join(tmp, f"{name}.ref.npy")
    run([sys.executable, os.path.join(HERE, "llama_ref.py"), "--model", model, "--tokens", ids,
         "--hidden", ref_path])
    ref = np.load(ref_path)
    raws = {}
    for chunk in (0, 7):
        out = os.path.join(tmp, f"{name}.{chunk}")
        run([os.path.join(build, "dump_logits"), "--model", model, "--tokens", ids, "--out",
             out + ".logits", "--hidden", out + ".hidden", "--chunk", str(chunk)])
        raws[chunk] = open(out + ".hidden", "rb").read()
    got = np.frombuffer(raws[0], dtype="<f4").reshape(ref.shape).astype(np.float64)
    err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    same = raws[0] == raws[7]
    print(f"  {name:34s} hidden rel err {err:.1e}  chunked {'identical' if same else 'DIFFERENT'}")
    if not err < TOL:
        failures.append(f"{name}: hidden states differ from the reference (rel err {err:.2e})")
    if not same:
        failures.append(f"{name}: hidden states fed in chunks of 7 differ from the whole")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--fixtures", default="build/fixtures")
    a = ap.parse_args()
    print("final hidden states vs float64 numpy reference:")
    failures = []
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("tiny", "wide"):
            model = os.path.join(a.fixtures, name)
            if not os.path.exists(os.path.join(model, "config.json")):
                print(f"  {name}: skipped ({model} is absent; `make` builds it)")
                continue
            vocab = 300  # below every fixture's vocabulary
            check(a.build, tmp, name, model, [1] + list(rng.integers(3, vocab, size=40)), failures)
    for f in failures:
        print("FAIL:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
