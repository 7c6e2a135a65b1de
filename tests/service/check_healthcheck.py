#!/usr/bin/python3
"""The Docker images' HEALTHCHECK, run as Docker runs it (`/bin/sh -c CMD`
with the container's environment) against real daemons on loopback:

  check_healthcheck.py --build build --model DIR

* plain http (no INFERD_SSL_CERTFILE): healthy;
* TLS (--ssl-keyfile/--ssl-certfile and INFERD_SSL_CERTFILE set): healthy;
  the same daemon asked without INFERD_SSL_CERTFILE (http): unhealthy;
* client certificates required (--ssl-cert-reqs 2): healthy with
  HEALTHCHECK_CERT/HEALTHCHECK_KEY, unhealthy without;
* a port nothing listens on: unhealthy.
Every Dockerfile* in the tree is checked. Certificates come from the openssl
tool; curl is what the images run. Exits non-zero on the first failure.
"""
import argparse
import glob
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_service import ROOT, check, free_port  # noqa: E402 - the shared helpers


def health_cmd(path):
    """The shell text after CMD in the file's HEALTHCHECK, continuations joined."""
    lines = open(path).read().split("\n")
    for i, ln in enumerate(lines):
        if ln.startswith("HEALTHCHECK"):
            text = ln
            while text.endswith("\\"):
                i += 1
                text = text[:-1] + " " + lines[i].strip()
            cmd = text.split(" CMD ", 1)
            if len(cmd) != 2:
                raise AssertionError(f"{path}: HEALTHCHECK without CMD")
            return cmd[1].strip()
    raise AssertionError(f"{path}: no HEALTHCHECK")


def openssl(tmp, *args):
    subprocess.run(["openssl", *args], cwd=tmp, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_certs(tmp):
    for name in ("ca", "server", "client"):
        openssl(tmp, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", f"{name}.key")
    openssl(tmp, "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=inferd-test-ca")
    for name in ("server", "client"):
        openssl(tmp, "req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}")
        openssl(tmp, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2")


class Daemon:
    def __init__(self, inferd, model, args, tls_env):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [inferd, "serve", "--model", model, "--host", "127.0.0.1", "--port", str(self.port),
             "--disable-log-stats", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.tls_env = tls_env
        end = time.time() + 60
        while time.time() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited {self.proc.returncode}: "
                                     f"{self.proc.stderr.read().decode()[-400:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            time.sleep(0.05)
        time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("daemon did not stop on SIGTERM")
        if rc != 0:
            raise AssertionError(f"daemon exited {rc} on SIGTERM")


def healthy(cmd, env, tries=40):
    """The check's exit status is 0 once the daemon serves (the model loads
    first); a check expected to fail is asked once it would have passed."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    for _ in range(tries):
        r = subprocess.run(["/bin/sh", "-c", cmd], env=full, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        if r.returncode == 0:
            return True
        time.sleep(0.25)
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    inferd = os.path.join(a.build, "inferd")
    tmp = tempfile.mkdtemp(prefix="inferd-health-")
    make_certs(tmp)
    f = lambda n: os.path.join(tmp, n)
    tls = ["--ssl-keyfile", f("server.key"), "--ssl-certfile", f("server.pem")]
    mtls = tls + ["--ssl-ca-certs", f("ca.pem"), "--ssl-cert-reqs", "2"]
    cmds = {os.path.basename(p): health_cmd(p)
            for p in sorted(glob.glob(os.path.join(ROOT, "Dockerfile*")))}
    plain, https, mutual = (Daemon(inferd, a.model, [], {}),
                            Daemon(inferd, a.model, tls, {}),
                            Daemon(inferd, a.model, mtls, {}))
    try:
        for name, cmd in cmds.items():
            print(f"check_healthcheck: {name}: {cmd}")
            # the one passing check of each daemon comes first, so the failing
            # ones are asked of a daemon known to be serving
            check(healthy(cmd, {"INFERD_PORT": str(plain.port)}), "plain http: healthy")
            check(healthy(cmd, {"INFERD_PORT": str(https.port),
                                "INFERD_SSL_CERTFILE": f("server.pem"),
                                "INFERD_SSL_KEYFILE": f("server.key")}), "TLS: healthy")
            check(not healthy(cmd, {"INFERD_PORT": str(https.port)}, tries=1),
                  "TLS daemon asked over http (no INFERD_SSL_CERTFILE): unhealthy")
            check(healthy(cmd, {"INFERD_PORT": str(mutual.port),
                                "INFERD_SSL_CERTFILE": f("server.pem"),
                                "HEALTHCHECK_CERT": f("client.pem"),
                                "HEALTHCHECK_KEY": f("client.key")}),
                  "client certificates required, HEALTHCHECK_CERT given: healthy")
            check(not healthy(cmd, {"INFERD_PORT": str(mutual.port),
                                    "INFERD_SSL_CERTFILE": f("server.pem")}, tries=1),
                  "client certificates required, none given: unhealthy")
            check(not healthy(cmd, {"INFERD_PORT": str(free_port())}, tries=1),
                  "nothing listening: unhealthy")
    finally:
        for d in (plain, https, mutual):
            d.stop()
    print("check_healthcheck: all passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"check_healthcheck: FAILED: {e}")
        sys.exit(1)
