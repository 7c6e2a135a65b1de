#!/usr/bin/python3
"""`inferd run-batch` (vLLM's run_batch, OpenAI's batch file format).

  check_batch.py --build build --model DIR

* A file of 200 mixed requests (completions, chat, lines that are not JSON, a
  wrong url or method, a body the server refuses) gives one output line per
  input line, in input order, each with its custom_id; lines that cannot be
  run carry an error and a null response, the rest the server's status and
  body.
* With --api-key, run-batch sends the key the server it starts wants.
* Greedy outputs equal the server's for the same bodies: the same daemon,
  started by this test, answers each body one at a time, and the texts,
  finish reasons, token counts and error statuses must match.
Exits non-zero on the first failure.
"""
import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def wait_health(port, proc):
    end = time.time() + 60
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("daemon did not become healthy")


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
          "additionalProperties": False}
TOOL = {"type": "function", "function": {"name": "get", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def line(i, url, body, method="POST"):
    return json.dumps({"custom_id": f"r{i}", "method": method, "url": url, "body": body})


def requests():
    """(input line text, expected kind): 'run' (the server's answer expected),
    'error' (a per-line error, null response) or 'batch400' (a body the
    server would stream: the batch answers 400)."""
    words = ["Once upon a time", "The cat", "hello", "A B C", "one two three four"]
    C, CH, R = "/v1/completions", "/v1/chat/completions", "/v1/responses"
    out = []
    for i in range(200):
        w = words[i % len(words)] + " " * (i % 3)
        msgs = [{"role": "user", "content": w}]
        k = i % 20
        if k == 0:
            out.append((line(i, C, {"prompt": w, "temperature": 0, "max_tokens": 4 + i % 7}), "run"))
        elif k == 1:
            out.append((line(i, CH, {"messages": msgs, "temperature": 0,
                                     "max_tokens": 6 + i % 5}), "run"))
        elif k == 2:
            body = {"input": w, "instructions": "Be brief.", "temperature": 0,
                    "max_output_tokens": 5 + i % 4}
            if i // 20 % 3 == 1:  # structured output
                body.update(max_output_tokens=24, text={"format": {
                    "type": "json_schema", "name": "s", "schema": SCHEMA, "strict": True}})
            elif i // 20 % 3 == 2:  # a forced call: a function_call item
                f = TOOL["function"]
                body.update(max_output_tokens=30, tools=[{"type": "function", **f}],
                            tool_choice={"type": "function", "name": f["name"]})
            out.append((line(i, R, body), "run"))
        elif k == 3:
            out.append(("{not json", "error"))
        elif k == 4:
            out.append((line(i, C, {"prompt": [w, w + "!"], "n": 2, "temperature": 0,
                                    "logprobs": 2, "max_tokens": 5}), "run"))
        elif k == 5:
            out.append((line(i, "/v1/embeddings", {"input": w}), "error"))
        elif k == 6:
            out.append((line(i, CH, {"messages": msgs, "temperature": 0, "logprobs": True,
                                     "top_logprobs": 2, "max_tokens": 5}), "run"))
        elif k == 7:
            out.append((line(i, C, {"prompt": w}, method="GET"), "error"))
        elif k == 8:
            out.append((line(i, CH, {"messages": msgs, "temperature": 0, "max_tokens": 24,
                                     "response_format": {"type": "json_schema", "json_schema": {
                                         "name": "s", "schema": SCHEMA}}}), "run"))
        elif k == 9:  # runs, and the server refuses it (400)
            out.append((line(i, C, {"prompt": w, "max_tokens": -3}), "run"))
        elif k == 10:
            out.append((line(i, C, {"prompt": w, "temperature": 0, "echo": True,
                                    "max_tokens": 3, "stop": ["e"]}), "run"))
        elif k == 11:
            out.append((line(i, CH, {"temperature": 0}), "run"))  # no messages: 400
        elif k == 12:
            out.append((line(i, CH, {"messages": msgs, "stream": True}), "batch400"))
        elif k == 13:
            out.append((json.dumps({"custom_id": f"r{i}", "method": "POST", "url": C,
                                    "body": [1, 2]}), "error"))
        elif k == 14:
            out.append((line(i, R, {"input": w, "store": True}), "run"))  # 400
        elif k == 15:
            out.append((line(i, C, {"prompt": w, "model": "nope"}), "run"))  # 404
        elif k == 16:
            out.append((line(i, CH, {"messages": msgs, "temperature": 0, "max_tokens": 30,
                                     "tools": [TOOL], "tool_choice": {
                                         "type": "function", "function": {"name": "get"}}}),
                        "run"))
        elif k == 17:
            out.append((line(i, C, {"prompt": w, "max_tokens": 100000}), "run"))  # too long
        elif k == 18:
            out.append((json.dumps({"method": "POST", "url": C, "body": {"prompt": w}}), "error"))
        else:
            out.append((line(i, C, {"prompt": w, "temperature": 0, "seed": i,
                                    "max_tokens": 4 + i % 7, "min_tokens": 2}), "run"))
    return out


def strip_ids(v):
    """A body without what differs between two runs: ids, times, and prefix
    cache hits (which depend on what ran before)."""
    if isinstance(v, dict):
        return {k: strip_ids(x) for k, x in v.items()
                if k not in ("id", "request_id", "created", "created_at", "item_id", "call_id",
                             "cached_tokens")}
    if isinstance(v, list):
        return [strip_ids(x) for x in v]
    return v


def run_batch(exe, fin, fout, model, extra=(), stdin=None):
    r = subprocess.run([exe, "run-batch", "-i", fin, "-o", fout, "--model", model,
                        "--max-num-seqs", "8", *extra], capture_output=True, timeout=300,
                       input=stdin)
    assert r.returncode == 0, f"run-batch exited {r.returncode}: {r.stderr[-2000:]}"
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    exe = os.path.join(a.build, "inferd")
    if not os.path.isfile(os.path.join(a.model, "config.json")):
        print(f"check_batch: SKIP: no model at {a.model}")
        return 0
    reqs = requests()
    with tempfile.TemporaryDirectory() as d:
        fin, fout = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(fin, "w") as f:
            for text, _ in reqs:
                f.write(text + "\n\n")  # blank lines are skipped
        r = run_batch(exe, fin, fout, a.model, ("--output-tmp-dir", d, "--enable-metrics"))
        assert b"requests done" in r.stderr, "no progress lines on stderr"
        raw = open(fout, "rb").read()
        outs = [json.loads(l) for l in raw.decode().splitlines()]
        # '-': stdin to stdout, the same lines
        sub = "".join(t + "\n" for t, _ in reqs[:12]).encode()
        r = run_batch(exe, "-", "-", a.model, stdin=sub)
        piped = [json.loads(l) for l in r.stdout.decode().splitlines()]
        assert [strip_ids(o) for o in piped] == [strip_ids(o) for o in outs[:12]], \
            "stdin/stdout run differs"
    assert len(outs) == len(reqs), f"{len(outs)} output lines for {len(reqs)} requests"
    port = free_port()
    p = subprocess.Popen([exe, "--model", a.model, "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n_ok = n_err = 0
    kinds = set()
    try:
        wait_health(port, p)
        for i, ((text, kind), o) in enumerate(zip(reqs, outs)):
            assert set(o) == {"id", "custom_id", "response", "error"}, o
            if kind == "error":
                assert o["response"] is None and o["error"]["message"], o
                want_cid = None if text.startswith("{not") or '"custom_id"' not in text \
                    else f"r{i}"
                assert o["custom_id"] == want_cid, o
                continue
            assert o["custom_id"] == f"r{i}" and o["error"] is None, o
            resp = o["response"]
            if kind == "batch400":
                assert resp["status_code"] == 400 and \
                    resp["body"]["error"]["param"] == "stream", resp
                continue
            line = json.loads(text)
            status, body = post(port, line["url"], json.dumps(line["body"]))
            assert resp["status_code"] == status, (i, resp, status, body)
            # the whole body, as the server sends it, but for ids and times
            assert strip_ids(resp["body"]) == strip_ids(body), \
                f"line {i}: batch {resp['body']} != server {body}"
            if status == 200:
                assert resp["request_id"] == resp["body"]["id"], resp
                n_ok += 1
                kinds.add(line["url"])
            else:
                n_err += 1
    finally:
        p.terminate()
        p.wait(timeout=30)
    assert n_ok >= 90 and len(kinds) == 3, f"only {n_ok} requests succeeded ({kinds})"
    print(f"check_batch: OK: {len(reqs)} lines in order, {n_ok} equal to the server's answers "
          f"({', '.join(sorted(kinds))}), {n_err} equal to its errors, the rest per-line errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
