#!/usr/bin/python3
"""A mock Hugging Face Hub on loopback for the hub client's checks.

It serves model directories under Hub ids with the Hub's URL layout:
  GET  /api/models/ORG/NAME/revision/REV   {"sha": COMMIT, "siblings": [...]}
  HEAD/GET /ORG/NAME/resolve/REV/FILE      small files: 200 with a git ETag;
       *.safetensors, *.gguf (LFS): 302 to /cdn/..., X-Linked-Etag = sha256, X-Linked-Size
  GET  /cdn/ORG/NAME/FILE                   the bytes, with Range (206)
A gated repo answers 401 without "Authorization: Bearer TOKEN". --cut FILE
closes the connection half-way through FILE's first download; --corrupt FILE
serves wrong bytes under the right ETag. Every request is appended to --log.
Prints the port on stdout, then serves until killed."""
import argparse
import hashlib
import http.server
import json
import os
import sys
import threading


def commit_of(repo):
    return hashlib.sha1(repo.encode()).hexdigest()


class Hub:
    def __init__(self, a):
        self.repos = dict(r.split("=", 1) for r in a.repo)
        self.gated, self.token = set(a.gated), a.token
        self.cut, self.corrupt = set(a.cut), set(a.corrupt)
        self.log, self.lock = a.log, threading.Lock()

    def files(self, repo):
        root = self.repos[repo]
        out = []
        for d, _, names in os.walk(root):
            for n in names:
                out.append(os.path.relpath(os.path.join(d, n), root))
        return sorted(out)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None

    def log_message(self, *args):
        pass

    def record(self):
        if self.hub.log:
            with self.hub.lock, open(self.hub.log, "a") as f:
                f.write(f"{self.command} {self.path} {self.headers.get('Range', '')}\n")

    def send(self, code, body=b"", headers=None, head=False):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def repo_of(self, parts):
        repo = "/".join(parts[:2])
        if repo not in self.hub.repos:
            self.send(404, b'{"error":"Repository not found"}', head=self.command == "HEAD")
            return None
        if repo in self.hub.gated and \
                self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            self.send(401, b'{"error":"Access to this model is restricted"}',
                      head=self.command == "HEAD")
            return None
        return repo

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        self.record()
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            repo = self.repo_of(parts[2:4])
            if repo:
                body = {"id": repo, "sha": commit_of(repo),
                        "siblings": [{"rfilename": f} for f in self.hub.files(repo)]}
                self.send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
            return
        if parts[0] == "cdn":
            return self.cdn(parts[1:3], "/".join(parts[3:]), head)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = self.repo_of(parts[:2])
            if not repo:
                return
            name = "/".join(parts[4:])
            path = os.path.join(self.hub.repos[repo], name)
            if parts[3] not in ("main", commit_of(repo)) or not os.path.isfile(path):
                return self.send(404, b'{"error":"Entry not found"}', head=head)
            data = open(path, "rb").read()
            common = {"X-Repo-Commit": commit_of(repo)}
            if name.endswith((".safetensors", ".gguf")):  # LFS: the Hub redirects to its CDN
                common.update({"X-Linked-Etag": '"%s"' % hashlib.sha256(data).hexdigest(),
                               "X-Linked-Size": str(len(data)),
                               "ETag": '"%s"' % hashlib.sha256(data).hexdigest(),
                               "Location": f"/cdn/{repo}/{name}"})
                return self.send(302, b"", common, head)
            blob = b"blob %d\0" % len(data) + data
            common["ETag"] = '"%s"' % hashlib.sha1(blob).hexdigest()
            return self.send(200, data, common, head)
        self.send(404, b"not found", head=head)

    def cdn(self, repo_parts, name, head):
        repo = "/".join(repo_parts)
        path = os.path.join(self.hub.repos.get(repo, "/nonexistent"), name)
        if not os.path.isfile(path):
            return self.send(404, b"not found", head=head)
        data = open(path, "rb").read()
        if name in self.hub.corrupt:
            data = bytes(b ^ 0x55 for b in data[:16]) + data[16:]
        start, code, headers = 0, 200, {"Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            if start >= len(data):
                return self.send(416, b"", head=head)
            code = 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        if name in self.hub.cut and not head:
            self.hub.cut.discard(name)  # only the first download is cut
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.send(code, body, headers, head)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", action="append", default=[], help="ORG/NAME=DIR")
    ap.add_argument("--gated", action="append", default=[])
    ap.add_argument("--token", default="secret")
    ap.add_argument("--cut", action="append", default=[])
    ap.add_argument("--corrupt", action="append", default=[])
    ap.add_argument("--log")
    a = ap.parse_args()
    Handler.hub = Hub(a)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
