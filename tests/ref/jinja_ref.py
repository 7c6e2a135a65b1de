#!/usr/bin/env python3
"""Reference renderer for inferd's Jinja interpreter: Python's Jinja2 set up
exactly as Hugging Face's apply_chat_template sets it up
(transformers/utils/chat_template_utils.py: _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), tojson as json.dumps with
ensure_ascii=False, raise_exception and strftime_now as globals.

Reads a JSON list of cases from stdin, each {"template": str, "vars": {...}},
and writes a JSON list of results, each {"ok": true, "out": str} or
{"ok": false, "error": str}. --now EPOCH fixes strftime_now's clock."""
import argparse
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    # HF's {% generation %} tag: renders its body (the tracking of assistant
    # spans for masks is not something a prompt needs).
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body)
        return call.set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        t = datetime.fromtimestamp(now) if now else datetime.now()
        return t.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--now", type=int, default=0)
    args = ap.parse_args()
    env = make_env(args.now)
    cases = json.load(sys.stdin)
    out = []
    compiled = {}
    for case in cases:
        src = case["template"]
        try:
            if src not in compiled:
                compiled[src] = env.from_string(src)
            text = compiled[src].render(**case.get("vars", {}))
            out.append({"ok": True, "out": text})
        except Exception as e:  # the message is what inferd should report too
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
