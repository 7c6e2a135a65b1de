#!/usr/bin/python3
"""`inferd run-batch` (vLLM's run_batch, OpenAI's batch file format).

  check_batch.py --build build --model DIR

* A file of mixed requests (completions, chat, lines that are not JSON, a
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


def requests():
    """(input line text, expected kind): kind is 'run' or 'error'."""
    words = ["Once upon a time", "The cat", "hello", "A B C", "one two three four"]
    out = []
    for i in range(60):
        w = words[i % len(words)] + " " * (i % 3)
        if i % 10 == 3:
            out.append(("{not json", "error"))
        elif i % 10 == 5:
            out.append((json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/embeddings",
                                    "body": {"input": w}}), "error"))
        elif i % 10 == 7:
            out.append((json.dumps({"custom_id": f"r{i}", "method": "GET", "url": "/v1/completions",
                                    "body": {"prompt": w}}), "error"))
        elif i % 10 == 9:  # runs, and the server refuses it (400)
            out.append((json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                    "body": {"prompt": w, "max_tokens": -3}}), "run"))
        elif i % 2:
            out.append((json.dumps({"custom_id": f"r{i}", "method": "POST",
                                    "url": "/v1/chat/completions",
                                    "body": {"messages": [{"role": "user", "content": w}],
                                             "temperature": 0, "max_tokens": 6 + i % 5}}), "run"))
        else:
            out.append((json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                    "body": {"prompt": w, "temperature": 0,
                                             "max_tokens": 4 + i % 7}}), "run"))
    return out


def essence(status, body):
    """What must match between the batch and the server: not ids or times."""
    if status != 200:
        return status, body.get("error", {}).get("type")
    return status, [(c.get("text", c.get("message", {}).get("content")), c["finish_reason"])
                    for c in body["choices"]], body["usage"]


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
        r = subprocess.run([exe, "run-batch", "-i", fin, "-o", fout, "--model", a.model,
                            "--max-num-seqs", "8"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"run-batch exited {r.returncode}: {r.stderr[-2000:]}"
        assert "requests done" in r.stderr, "no progress lines on stderr"
        outs = [json.loads(l) for l in open(fout)]
        # with --api-key the server wants it, and run-batch sends it
        with open(fin, "w") as f:
            f.write(reqs[0][0] + "\n")
        r = subprocess.run([exe, "run-batch", "-i", fin, "-o", fout, "--model", a.model,
                            "--api-key", "sekrit"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"run-batch --api-key exited {r.returncode}: {r.stderr[-2000:]}"
        keyed = [json.loads(l) for l in open(fout)]
        assert len(keyed) == 1 and keyed[0]["response"]["status_code"] == 200, keyed
    assert len(outs) == len(reqs), f"{len(outs)} output lines for {len(reqs)} requests"
    port = free_port()
    p = subprocess.Popen([exe, "--model", a.model, "--port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n_ok = n_chat = 0
    try:
        wait_health(port, p)
        for i, ((text, kind), o) in enumerate(zip(reqs, outs)):
            assert set(o) == {"id", "custom_id", "response", "error"}, o
            if kind == "error":
                assert o["response"] is None and o["error"]["message"], o
                want_cid = None if text.startswith("{not") else f"r{i}"
                assert o["custom_id"] == want_cid, o
                continue
            assert o["custom_id"] == f"r{i}" and o["error"] is None, o
            line = json.loads(text)
            resp = o["response"]
            status, body = post(port, line["url"], json.dumps(line["body"]))
            assert resp["status_code"] == status, (i, resp, status, body)
            got, want = essence(resp["status_code"], resp["body"]), essence(status, body)
            assert got == want, f"line {i}: batch {got} != server {want}"
            if status == 200:
                assert resp["request_id"] == resp["body"]["id"], resp
                n_ok += 1
                n_chat += line["url"] == "/v1/chat/completions"
    finally:
        p.terminate()
        p.wait(timeout=30)
    assert n_ok >= 20, f"only {n_ok} requests succeeded"
    print(f"check_batch: OK: {len(reqs)} lines, {n_ok} equal to the server's "
          f"({n_chat} chat), the rest per-line errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
