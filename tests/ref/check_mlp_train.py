#!/usr/bin/python3
"""scripts/train_mlp_speculator end to end on a small target: inferd
generates the data, a few training steps make the loss fall, and the
checkpoint it writes loads in inferd (build/mlp_spec_dump, with the target's
vocabulary and hidden size checked) and proposes what the float64 numpy
version of the equations (mlp_spec_ref.py) computes from the same weights.
`inferd generate`'s greedy output is the same with speculation off and on
(this speculator, n-gram, the draft model llama2xs-260K when present), and
the MLP speculator drafts. --data-model: a padded copy of the target
(../shared/tools/pad_model.py, a small shape) gets a speculator trained on
the source's data that reads its hidden states, and greedy output on it is
the same with that speculator on and off.

  check_mlp_train.py [--build build] [--model DIR]

Skips (saying so) when PyTorch is not importable: the trainer needs it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mlp_spec_ref as ref  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=os.path.join(ROOT, "..", "shared", "models", "stories260K"))
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP check_mlp_train: PyTorch is not importable (python3-torch)")
        return 0
    if not os.path.exists(os.path.join(a.model, "config.json")):
        print(f"SKIP check_mlp_train: {a.model} is absent")
        return 0
    failures = []
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    V, D = cfg["vocab_size"], cfg["hidden_size"]
    with tempfile.TemporaryDirectory() as tmp:
        out, js = os.path.join(tmp, "spec"), os.path.join(tmp, "hist.json")
        pf = os.path.join(tmp, "prompts.json")
        with open(pf, "w") as f:
            json.dump({"bench": ["Once upon a time"], "dev": ["The little dog", "Tim was sad"]}, f)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_mlp_speculator"),
                            "--target", a.model, "--out", out, "--build", a.build, "--seqs", "4",
                            "--gen-tokens", "48", "--steps", "60", "--steps2", "20", "--batch", "64",
                            "--n-predict", "3", "--prompts", pf, "--holdout-tokens", "48", "--json", js],
                           capture_output=True, text=True)
        if r.returncode:
            print(r.stderr)
            print("FAIL: train_mlp_speculator failed")
            return 1
        loss = np.array(json.load(open(js))["loss"])  # [steps, n_predict]
        first, last = loss[:5].sum(1).mean(), loss[55:60].sum(1).mean()
        print(f"MLP speculator trainer on {os.path.basename(a.model)}: stage-1 loss "
              f"{first:.3f} -> {last:.3f} (sum of 3 stages, mean of 5 steps)")
        if not last < first - 1.0:
            failures.append(f"the loss did not fall ({first:.3f} -> {last:.3f})")
        with open(os.path.join(out, "config.json")) as f:
            c = json.load(f)
        if c.get("model_type") != "mlp_speculator" or c["vocab_size"] != V or c["emb_dim"] != D:
            failures.append(f"config.json is not a speculator for the target: {c}")
        rng = np.random.default_rng(5)
        worst = 0.0
        for trial in range(3):
            h = rng.normal(0, 1.0, D).astype(np.float32)
            tok = int(rng.integers(3, V))
            want, want_toks = ref.run(out, h.astype(np.float64), tok, 3)
            hf, lf = os.path.join(tmp, "h.f32"), os.path.join(tmp, "lg.f32")
            h.tofile(hf)
            d = subprocess.run([os.path.join(a.build, "mlp_spec_dump"), "--model", out, "--hidden", hf,
                                "--token", str(tok), "--k", "3", "--out", lf,
                                "--target-vocab", str(V), "--target-hidden", str(D)],
                               capture_output=True, text=True)
            if d.returncode:
                failures.append(f"inferd refused the checkpoint: {d.stderr.strip()}")
                break
            got = np.fromfile(lf, dtype="<f4").reshape(3, V).astype(np.float64)
            worst = max(worst, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
            if [int(t) for t in d.stdout.split()] != want_toks:
                failures.append("inferd's proposals from the trained checkpoint differ from numpy's")
        print(f"  checkpoint loads in inferd; logits rel err vs numpy {worst:.1e}")
        if not worst < 1e-5:
            failures.append(f"logits differ from the reference (rel err {worst:.2e})")
        draft = os.path.join(os.path.dirname(a.model), "llama2xs-260K")
        spec = [("mlp", ["--speculative-config", json.dumps({"model": out, "num_speculative_tokens": 3})]),
                ("ngram", ["--speculative-model", "[ngram]", "--num-speculative-tokens", "3"])]
        if os.path.exists(os.path.join(draft, "config.json")):
            spec.append(("draft", ["--speculative-model", draft, "--num-speculative-tokens", "3"]))
        failures += heldout_written(a, out)
        failures += same_on_and_off(a.build, a.model, spec)
        failures += replay_matches(a, out, tmp)
        failures += padded(a, tmp)
    failures += mask_drops_touching_examples()
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


def trainer_module():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from benchlib import script_module
    return script_module("train_mlp_speculator")


def heldout_written(a, spec_dir):
    """heldout.json lists each held-out prompt with its greedy text as
    `inferd generate` writes it (what bench_spec compares its own text to)."""
    try:
        with open(os.path.join(spec_dir, "heldout.json")) as f:
            h = json.load(f)
    except (OSError, ValueError) as e:
        return [f"heldout.json: {e}"]
    got = {(e["set"], e["prompt"]) for e in h["prompts"]}
    want = {("bench", "Once upon a time"), ("dev", "The little dog"), ("dev", "Tim was sad")}
    if got != want or h["window"] != 16:
        return [f"heldout.json lists {sorted(got)} (window {h['window']}), want {sorted(want)} (16)"]
    e = h["prompts"][-1]
    r = subprocess.run([os.path.join(a.build, "inferd"), "generate", "--model", a.model, "--prompt",
                        e["prompt"], "--max-tokens", "48", "--output-ids", "--quiet", "--threads", "1"],
                       capture_output=True, text=True)
    if e["ids"][e["prompt_len"]:] != [int(t) for t in r.stdout.split()]:
        return [f"heldout.json's text for {e['prompt']!r} is not inferd generate's greedy text"]
    print(f"  heldout.json: {len(got)} prompts with their greedy text, as inferd generate writes it")
    return []


def mask_drops_touching_examples():
    """examples() with heldout_mask() drops exactly the examples whose
    positions t..t+N+1 touch a run of `window` tokens shared with held-out
    text, counted here by brute force on random sequences with held-out runs
    planted in them."""
    import torch  # noqa: F401  (the trainer module imports it lazily)
    tm = trainer_module()
    rng = np.random.default_rng(3)
    W, N, D = 16, 3, 4
    held_ids = rng.integers(3, 50, 40)
    seqs = []
    for j in range(6):
        ids = rng.integers(50, 500, 120)  # disjoint from the held-out vocabulary but where planted
        if j % 2 == 0:
            at, ln = int(rng.integers(0, 90)), int(rng.integers(W - 2, 30))
            src = int(rng.integers(0, 40 - min(ln, 40)))
            ids[at:at + ln] = held_ids[src:src + ln][:len(ids) - at]
        seqs.append((ids.astype(np.int64), rng.normal(size=(120, D)).astype(np.float32), 1, 2))
    held = [(held_ids.astype(np.int64), None, 3, 1)]
    h, x = tm.examples(seqs, N, 1, tm.heldout_mask(seqs, held, W))
    grams = {tuple(held_ids[i:i + W]) for i in range(len(held_ids) - W + 1)}
    want = []
    for ids, hh, _, _ in seqs:
        bad = np.zeros(len(ids), bool)
        for i in range(len(ids) - W + 1):
            bad[i:i + W] |= tuple(ids[i:i + W]) in grams
        want += [ids[t + 1:t + 2 + N] for t in range(len(ids) - N - 1) if not bad[t:t + N + 2].any()]
    total = sum(len(s[0]) - N - 1 for s in seqs)
    print(f"  hold-out mask: {total - len(want)} of {total} examples touch held-out runs, "
          f"{total - len(x)} dropped")
    if len(x) != len(want) or len(want) == total or not np.array_equal(x, np.array(want)):
        return [f"the hold-out mask kept {len(x)} examples, want {len(want)} of {total}"]
    return []


def replay_matches(a, spec_dir, tmp):
    """The trainer's acceptance replay (the figure it prints for held-out
    data) counts what the engine counts: inferd generate's drafts and
    acceptance per position on a greedy text, with an acceptance floor of
    0.3 (above the default 0.1, so that pauses happen with this barely
    trained speculator)."""
    import torch
    tm = trainer_module()
    c = json.load(open(os.path.join(spec_dir, "config.json")))
    w = ref.read_safetensors(os.path.join(spec_dir, "model.safetensors"))
    m = tm.Speculator(torch, c["vocab_size"], c["emb_dim"], c["inner_dim"] or c["emb_dim"],
                      c["n_predict"], c["scale_input"], 0)
    for k in m.p:
        m.p[k] = torch.from_numpy(w["speculator." + k].astype(np.float32))
    fails = []
    for prompt in ([1, 403, 407], [1, 300]):
        r = subprocess.run([os.path.join(a.build, "inferd"), "generate", "--model", a.model,
                            "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", "80",
                            "--ignore-eos", "--output-ids", "--threads", "1", "--speculative-config",
                            json.dumps({"model": spec_dir, "num_speculative_tokens": 3,
                                                    "min_acceptance": 0.3})],
                           capture_output=True, text=True)
        ms = re.search(r"speculation \(.*\): (\d+) drafts.*acceptance per position ([0-9. ]+)", r.stderr)
        if r.returncode or not ms:
            return [f"generate with the MLP speculator: {r.stderr.strip()[-300:]}"]
        ids = prompt + [int(t) for t in r.stdout.split()]
        hf, lf = os.path.join(tmp, "rh.f32"), os.path.join(tmp, "rl.f32")
        subprocess.run([os.path.join(a.build, "dump_logits"), "--model", a.model, "--tokens",
                        ",".join(map(str, ids)), "--out", lf, "--hidden", hf, "--threads", "1"], check=True)
        h = np.fromfile(hf, dtype="<f4").reshape(len(ids), c["emb_dim"])
        per, _, drafts = tm.replay(torch, m, [(np.array(ids), h, 2, len(prompt))], 3, 0.3)
        want = [float(v) for v in ms.group(2).split()]
        print(f"  replay on {len(ids) - len(prompt)} greedy tokens: {drafts} drafts, per position "
              + " ".join(f"{v:.3f}" for v in per) + f"; inferd: {ms.group(1)} drafts, "
              + " ".join(f"{v:.3f}" for v in want))
        if drafts != int(ms.group(1)) or len(want) != len(per) or \
                max(abs(x - y) for x, y in zip(per, want)) > 6e-4:
            fails.append("the trainer's acceptance replay differs from inferd's counters")
    return fails


def generate(build, model, extra):
    """Greedy ids of `inferd generate` and the drafts it reports verifying."""
    r = subprocess.run([os.path.join(build, "inferd"), "generate", "--model", model, "--prompt",
                        "Once upon a time", "--max-tokens", "96", "--output-ids", "--threads", "1"]
                       + extra, capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()
    m = re.search(r"speculation \(.*\): (\d+) drafts", r.stderr)
    return r.stdout.split(), int(m.group(1)) if m else 0


def same_on_and_off(build, model, spec):
    """Greedy `inferd generate` output is the same with each proposer as without."""
    fails = []
    off, _ = generate(build, model, [])
    for name, extra in spec:
        on, drafts = generate(build, model, extra)
        if on is None:
            fails.append(f"generate with {name} failed: {drafts}")
        elif on != off:
            fails.append(f"generate with {name}: greedy output differs from speculation off")
        elif name == "mlp" and drafts == 0:
            fails.append("generate with the MLP speculator verified no drafts")
        else:
            print(f"  inferd generate on {os.path.basename(model)}: {len(on)} greedy tokens "
                  f"identical with {name} on ({drafts} drafts) and off")
    return fails


def padded(a, tmp):
    """--data-model: a speculator for a padded copy of the target."""
    big, out = os.path.join(tmp, "padded"), os.path.join(tmp, "spec-padded")
    pf = os.path.join(tmp, "prompts-padded.json")
    with open(pf, "w") as f:
        json.dump({"bench": ["Once upon a time"]}, f)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "..", "shared", "tools", "pad_model.py"),
                        a.model, big, "--hidden", "128", "--intermediate", "256", "--layers", "6",
                        "--heads", "8", "--kv-heads", "4", "--head-dim", "16", "--dtype", "f32"],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"  SKIP --data-model: no padded copy ({r.stderr.strip()[-200:]})")
        return []
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "train_mlp_speculator"),
                        "--target", big, "--data-model", a.model, "--out", out, "--build", a.build,
                        "--seqs", "4", "--gen-tokens", "48", "--steps", "60", "--steps2", "20",
                        "--batch", "64", "--n-predict", "3", "--prompts", pf, "--holdout-tokens", "24"],
                       capture_output=True, text=True)
    if r.returncode:
        return [f"train_mlp_speculator --data-model failed: {r.stderr.strip()[-400:]}"]
    c = json.load(open(os.path.join(out, "config.json")))
    if c["emb_dim"] != 128 or c["inner_dim"] != 64:
        return [f"--data-model: emb_dim {c['emb_dim']} / inner_dim {c['inner_dim']}, want 128 / 64"]
    print("  --data-model: a speculator for the padded copy (emb_dim 128, inner_dim 64)")
    # the bench prompt's greedy text is held out as SRC and as the padded target write it
    h = json.load(open(os.path.join(out, "heldout.json")))["prompts"]
    r = subprocess.run([os.path.join(a.build, "inferd"), "generate", "--model", big, "--prompt",
                        "Once upon a time", "--max-tokens", "24", "--output-ids", "--quiet", "--threads", "1"],
                       capture_output=True, text=True)
    if len(h) != 2 or h[-1]["ids"][h[-1]["prompt_len"]:] != [int(t) for t in r.stdout.split()]:
        return ["--data-model: heldout.json lacks the padded target's own greedy text"]
    return same_on_and_off(a.build, big, [("mlp", ["--speculative-config", json.dumps(
        {"model": out, "num_speculative_tokens": 3})])])


if __name__ == "__main__":
    sys.exit(main())
