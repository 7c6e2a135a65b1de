#!/usr/bin/python3
"""Running inferd as a service: systemd's notification protocol, the config
file's precedence and errors, and the access log.

  check_service.py --build build --model DIR

* NOTIFY_SOCKET: the daemon, started with NOTIFY_SOCKET pointing at a socket
  this test listens on (and WATCHDOG_USEC set), sends STATUS= lines while it
  loads, READY=1 only once /health answers 200, WATCHDOG=1 while running, and
  STOPPING=1 on SIGTERM; it then exits 0.
* Config: flags override the YAML file, which overrides INFERD_* variables;
  an unknown key or a bad value fails start-up naming the file, line and key.
* Access log: one line per request with method, path, status, tokens in/out,
  latency and the request id, as text and as JSON; --disable-access-log turns
  it off; the API key never appears in the log.
Exits non-zero on the first failure.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def request(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request(method, path, json.dumps(body) if body is not None else None, headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def wait_health(port, proc, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode}")
        try:
            if request(port, "GET", "/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("daemon not ready")


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print(f"  ok: {what}")


def test_notify(inferd, model):
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.05)
    port = free_port()
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    env.pop("WATCHDOG_PID", None)
    proc = subprocess.Popen([inferd, "--model", model, "--port", str(port), "--disable-log-stats"],
                            env=env, stderr=subprocess.DEVNULL)
    got, ready_health = [], None
    try:
        end = time.time() + 30
        while time.time() < end and ready_health is None:
            try:
                msg = sock.recv(4096).decode()
            except socket.timeout:
                continue
            got.append(msg)
            if "READY=1" in msg.split("\n"):
                ready_health = request(port, "GET", "/health")[0]
        check(ready_health == 200, "READY=1 is sent, and /health is 200 when it arrives")
        check(any(m.startswith("STATUS=loading") for m in got), "STATUS= lines while loading")
        pings = 0
        end = time.time() + 1.5
        while time.time() < end:
            try:
                pings += sock.recv(4096).decode() == "WATCHDOG=1"
            except socket.timeout:
                pass
        check(pings >= 3, f"WATCHDOG=1 every half period while running ({pings} in 1.5 s)")
        proc.send_signal(signal.SIGTERM)
        stopping, end = False, time.time() + 10
        while time.time() < end and not stopping:
            try:
                stopping = "STOPPING=1" in sock.recv(4096).decode().split("\n")
            except socket.timeout:
                pass
        check(stopping, "STOPPING=1 on SIGTERM")
        check(proc.wait(timeout=30) == 0, "exit 0 after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
        os.unlink(path)


def test_config(inferd, model):
    tmp = tempfile.mkdtemp()
    cfg = os.path.join(tmp, "inferd.yaml")
    port = free_port()
    with open(cfg, "w") as f:
        f.write(f"# precedence test\nmodel: {model}\nport: {port}\nserved-model-name: from-file\n"
                "max_num_seqs: 4\nspeculative-config:\n  method: ngram\n  num_speculative_tokens: 3\n"
                "disable-log-stats: true\n")

    def served(extra, env_name):
        env = dict(os.environ, INFERD_SERVED_MODEL_NAME=env_name, INFERD_PORT=str(free_port()))
        p = subprocess.Popen([inferd] + extra, env=env, stderr=subprocess.DEVNULL)
        try:
            port_used = int(extra[extra.index("--port") + 1]) if "--port" in extra else port
            wait_health(port_used, p)
            return json.loads(request(port_used, "GET", "/v1/models")[1])["data"][0]["id"]
        finally:
            p.terminate()
            p.wait()

    check(served(["--config", cfg], "from-env") == "from-file", "the config file overrides INFERD_*")
    p2 = free_port()
    check(served(["--config", cfg, "--served-model-name", "from-flag", "--port", str(p2)], "from-env")
          == "from-flag", "a flag overrides the config file")
    cases = [("bogus-key: 1\n", r"inferd\.yaml:2: key 'bogus-key': unknown option"),
             ("port: eighty\n", r"inferd\.yaml:2: key 'port': --port expects an integer"),
             ("disable-log-stats: maybe\n", r"inferd\.yaml:2: key 'disable-log-stats'"),
             ("model: [unclosed\n", r"inferd\.yaml:\d+")]
    for body, pattern in cases:
        with open(cfg, "w") as f:
            f.write(f"model: {model}\n{body}")
        r = subprocess.run([inferd, "--config", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode != 0 and re.search(pattern, r.stderr),
              f"config error names file, line and key: {pattern!r} ({r.stderr.strip()[:100]})")
    r = subprocess.run([inferd, "--config", os.path.join(tmp, "missing.yaml")], capture_output=True,
                       text=True, timeout=20)
    check(r.returncode != 0 and "missing.yaml" in r.stderr, "a missing config file is a clear error")


def test_environment(inferd, model):
    """INFERD_* alone configures the daemon; a flag beats the environment,
    also for an "--x" flag against INFERD_NO_X."""
    port = free_port()
    env = dict(os.environ, INFERD_API_KEY="env-key-42", INFERD_PORT=str(port),
               INFERD_NO_ENABLE_PREFIX_CACHING="true", INFERD_DISABLE_LOG_STATS="1")
    prompt = {"prompt": "Once upon a time " * 12, "max_tokens": 2, "temperature": 0}
    auth = {"Authorization": "Bearer env-key-42", "Content-Type": "application/json"}

    def cached(extra):
        p = subprocess.Popen([inferd, "--model", model] + extra, env=env, stderr=subprocess.DEVNULL)
        try:
            wait_health(port, p)
            check(request(port, "GET", "/v1/models")[0] == 401, "INFERD_API_KEY alone requires the key")
            request(port, "POST", "/v1/completions", prompt, auth)
            st, body = request(port, "POST", "/v1/completions", prompt, auth)
            check(st == 200, "the key from INFERD_API_KEY is accepted")
            return json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
        finally:
            p.terminate()
            p.wait()

    check(cached([]) == 0, "INFERD_NO_ENABLE_PREFIX_CACHING=true turns prefix caching off")
    check(cached(["--enable-prefix-caching"]) > 0, "--enable-prefix-caching beats INFERD_NO_ENABLE_PREFIX_CACHING")


def test_access_log(inferd, model):
    for fmt in ("text", "json"):
        port = free_port()
        log = tempfile.TemporaryFile(mode="w+")
        p = subprocess.Popen([inferd, "--model", model, "--port", str(port), "--log-format", fmt,
                              "--api-key", "sekret-key-123", "--disable-log-stats"], stderr=log)
        try:
            wait_health(port, p)
            st, body = request(port, "POST", "/v1/completions",
                            {"prompt": "Once upon a time", "max_tokens": 7, "temperature": 0},
                            {"Authorization": "Bearer sekret-key-123", "Content-Type": "application/json"})
            rid = json.loads(body)["id"]
            request(port, "GET", "/v1/models")  # 401: logged too
        finally:
            p.terminate()
            p.wait()
        log.seek(0)
        lines = log.read().splitlines()
        check(not any("sekret-key-123" in x for x in lines), f"{fmt}: the API key never appears in the log")
        check(not any("Once upon" in x for x in lines), f"{fmt}: the prompt text never appears in the log")
        if fmt == "json":
            recs = [json.loads(x) for x in lines]
            check(all({"ts", "level", "component"} <= set(r) for r in recs), "json: every line is an object with ts, level, component")
            acc = [r for r in recs if r["component"] == "access"]
            gen = next(r for r in acc if r["path"] == "/v1/completions")
            check(gen["method"] == "POST" and gen["status"] == 200 and gen["request_id"] == rid and
                  gen["tokens_out"] == 7 and gen["tokens_in"] > 0 and gen["latency_s"] >= 0,
                  "json: access record has method, path, status, request id, tokens, latency")
            check(any(r["path"] == "/v1/models" and r["status"] == 401 for r in acc), "json: a refused request is logged with 401")
        else:
            acc = [x for x in lines if " access" in x]
            gen = next(x for x in acc if "/v1/completions" in x)
            check(re.search(rf"access \[{re.escape(rid)}\] 127\.0\.0\.1 POST /v1/completions 200 "
                            r"tokens_in=\d+ tokens_out=7 latency=[0-9.]+s", gen),
                  f"text: access line has the fields ({gen.split(' ', 2)[2]})")
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([inferd, "--model", model, "--port", str(port), "--disable-access-log"], stderr=log)
    try:
        wait_health(port, p)
        request(port, "GET", "/health")
    finally:
        p.terminate()
        p.wait()
    log.seek(0)
    check(" access" not in log.read(), "--disable-access-log turns the access log off")


def test_step_log(inferd, model):
    """--log-level debug logs every engine step; the default level does not."""
    for level, want in (("debug", True), ("info", False)):
        port = free_port()
        log = tempfile.TemporaryFile(mode="w+")
        p = subprocess.Popen([inferd, "--model", model, "--port", str(port), "--log-level", level,
                              "--disable-log-stats"], stderr=log)
        try:
            wait_health(port, p)
            st, _ = request(port, "POST", "/v1/completions",
                            {"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0},
                            {"Content-Type": "application/json"})
            check(st == 200, f"{level}: completion answered")
        finally:
            p.terminate()
            p.wait()
        log.seek(0)
        steps = [x for x in log.read().splitlines()
                 if re.search(r"engine step \d+: 1 seqs, \d+ tokens, [0-9.]+ ms", x)]
        if want:  # the prompt in one step, then one step per further token
            check(len(steps) >= 5, f"debug: a line per engine step ({len(steps)} lines)")
        else:
            check(not steps, "info: no per-step lines")


def test_prefill_cap(inferd, _fixture):
    """--max-prefill-tokens-while-decoding reaches the scheduler: beside a
    decoding stream a 120-token prompt goes in 8 tokens a step by default
    (1 decode + 8 prompt per step), and whole with 0. The model is made here,
    big enough (a millisecond or so a step) that the stream is still decoding
    when the prompt arrives (on the tiny fixture it sometimes was not)."""
    tmp = tempfile.mkdtemp()
    slow = os.path.join(tmp, "slow")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_model.py"), slow, "--seed", "5",
                    "--hidden", "384", "--intermediate", "1024", "--layers", "4", "--heads", "6",
                    "--kv-heads", "2", "--max-pos", "1024"], check=True, stdout=subprocess.DEVNULL)
    try:
        long_prompt = [5 + i % 300 for i in range(120)]
        for extra, capped in (([], True), (["--max-prefill-tokens-while-decoding", "0"], False)):
            port = free_port()
            log = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen([inferd, "--model", slow, "--port", str(port), "--log-level", "debug",
                                  "--disable-log-stats"] + extra, stderr=log)
            try:
                wait_health(port, p)
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                c.request("POST", "/v1/completions", json.dumps(
                    {"prompt": [1, 5, 6, 7], "max_tokens": 1000, "temperature": 0, "ignore_eos": True,
                     "stream": True}), {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read1(4096)  # the stream is decoding
                st, _ = request(port, "POST", "/v1/completions",
                                {"prompt": long_prompt, "max_tokens": 1, "temperature": 0},
                                {"Content-Type": "application/json"})
                check(st == 200, f"{extra or 'default'}: the long prompt answered")
                c.close()  # the stream is cancelled
            finally:
                p.terminate()
                p.wait()
            log.seek(0)
            both = [int(m.group(1)) for m in re.finditer(r"engine step \d+: 2 seqs, (\d+) tokens", log.read())]
            check(both, f"{extra or 'default'}: steps ran the stream and the prompt together ({len(both)})")
            if capped:
                check(max(both) <= 9 and len(both) >= 120 // 8,
                      f"default: the prompt went in at most 8 tokens a step beside the stream (largest step {max(both)})")
            else:
                check(max(both) >= 121, f"0: the prompt went in whole beside the stream (largest step {max(both)})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    inferd = os.path.join(a.build, "inferd")
    print("service checks:")
    for t in (test_notify, test_config, test_environment, test_access_log, test_step_log,
              test_prefill_cap):
        try:
            t(inferd, a.model)
        except AssertionError as e:
            print(f"FAILED: {t.__name__}: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
