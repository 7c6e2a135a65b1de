#!/usr/bin/env python3
"""The grammar engine against independent references: Python's json and a
JSON Schema validator written from the spec (jsonschema_ref.py), Python's
re for regexes, hand predicates for GBNF grammars.

For every grammar, through build/gram_check:
- candidate strings (valid instances serialized both json.dumps ways,
  mutations of them, random strings): every accepted string must be valid;
  for regexes and GBNF acceptance must equal the reference exactly; valid
  JSON in the generated style must be accepted;
- random walks through token masks: every finished walk must be valid, and
  most walks must finish;
- grammars that cannot compile: the error names the part.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jsonschema_ref as js  # noqa: E402

SCHEMAS = [
    {"type": "integer"},
    {"type": "number"},
    {"type": "string"},
    {"type": "boolean"},
    {"type": ["integer", "null"]},
    {"enum": ["red", "green", 3, None, True, {"a": [1]}]},
    {"const": {"k": "v", "n": [1, 2.5, None]}},
    {"type": "string", "minLength": 2, "maxLength": 4},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "ipv4"},
    {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$", "examples": ["AB-123", "ZZ-000"]},
    {"type": "string", "pattern": "ab+c", "examples": ["xabbc", "abc", "abc-\"q\""]},
    {"type": "string", "pattern": "^[^a-z]*$", "examples": ["", "ABC 12", "\"\n\\"]},
    {"type": "integer", "minimum": -15, "maximum": 230},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "integer", "minimum": 1000, "exclusiveMaximum": 100000},
    {"type": "integer", "maximum": -7},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": -2, "exclusiveMaximum": 3},
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "number", "maximum": -1},
    {"type": "array", "items": {"type": "integer"}},
    {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}, "minItems": 2, "maxItems": 4},
    {"type": "array", "prefixItems": [{"const": 1}, {"const": 2}, {"const": 3}], "minItems": 1, "items": False},
    {"type": "array", "maxItems": 0},
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}},
    {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id", "extra"]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
     "additionalProperties": {"type": "string"}},
    {"type": "object", "additionalProperties": True},
    {"type": "object", "properties": {}, "additionalProperties": {"type": "array", "items": {"type": "integer"}}},
    {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer"}]},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind", "x"]},
               {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind", "y"]}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
               {"$ref": "#/$defs/b"}],
     "$defs": {"b": {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}}},
    {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                         "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                        "required": ["value"], "additionalProperties": False}},
     "$ref": "#/$defs/node"},
    {"definitions": {"p": {"type": "string", "enum": ["x", "y"]}},
     "type": "object", "properties": {"list": {"type": "array", "items": {"$ref": "#/definitions/p"}}}, "required": ["list"]},
    # a nested schema of the kind agents send (OpenAI strict style)
    {"type": "object", "properties": {
        "user": {"type": "object", "properties": {
            "name": {"type": "string"}, "email": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}}},
            "required": ["name", "email", "tags"], "additionalProperties": False},
        "score": {"type": "number"}, "when": {"type": "string", "format": "date-time"},
        "status": {"anyOf": [{"type": "string", "enum": ["ok", "fail"]}, {"type": "null"}]}},
     "required": ["user", "score", "when", "status"], "additionalProperties": False},
    True,
    {},
]

REGEXES = [
    (r"\d{3}-\d{4}", ["555-1234", "000-0000"]),
    (r"(ab|cd)*e?", ["", "abcde", "e", "cdab"]),
    (r"[A-Z][a-z]{1,5}( [A-Z][a-z]{1,5})?", ["Hello", "Ab Cd"]),
    (r"(?:0|[1-9]\d*)(?:\.\d+)?", ["0", "10.5", "7"]),
    (r"[^abc\n]+x", ["zzx", "xx"]),
    (r"\w+@\w+\.(com|org)", ["a@b.com", "x_1@y.org"]),
    (r".{2,4}", ["ab", "a b", "éé日😀"]),
    (r"a|b|", ["", "a", "b"]),
    (r"(x(y(z)?)?)+", ["x", "xyzxy"]),
    (r"é+[日-本]\s?", ["éé日", "é本 "]),
    (r"\x41\u00e9{2}\.", ["Aéé."]),
    (r"^(yes|no)$", ["yes", "no"]),
    (r"[\d\s_-]{0,3}?z", ["z", "1 _z"]),
    (r"(?P<w>\w)[\[\]]", ["a[", "_]"]),
    (r"a{2}b{1,}c{0,2}", ["aab", "aabbcc"]),
]

# GBNF grammars and an exact reference for each (a regex, or a function).
def _balanced(s):
    depth = 0
    for ch in s:
        depth += 1 if ch == "(" else -1 if ch == ")" else 0
        if depth < 0 or ch not in "()":
            return False
    return depth == 0


GBNFS = [
    ('root ::= "a" b* "c"{2,3}\nb ::= [x-z] | "q" b', r"a(q*[x-z])*c{2,3}", "aqxcc"),
    ('root ::= item ("," item){0,2}\nitem ::= [0-9]+ | "\\"" [^"]* "\\""  # comment\n', r'(\d+|"[^"]*")(,(\d+|"[^"]*")){0,2}', '1,"x",22'),
    ("root ::= (\n  \"x\" |\n  \"yy\"\n)+ [^\\x00-\\x40]?", r"(x|yy)+[^\x00-\x40]?", "xyyé"),
    ("root ::= \"\" | \"(\" root \")\" root", _balanced, "(())()"),
    ('root ::= [a-c]{0,2} [\\u00e9\\U0001F600] .', r"[a-c]{0,2}[é😀].", "abé!"),
    ('root ::= "\\t\\n\\\\" "[" [\\]\\[-]', r"\t\n\\\[[\]\[-]", "\t\n\\[-"),
]

# oneOf in strict mode: compiled only where no document can match two
# branches, so anyOf's grammar is exact; the reference checks "exactly one".
ONE_OF = [
    {"oneOf": [{"type": "string", "maxLength": 4}, {"type": "integer"}, {"type": "null"}]},
    {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                "additionalProperties": False},
               {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"],
                "additionalProperties": False}]},
    {"$defs": {"cat": {"type": "object", "properties": {"pet": {"const": "cat"}, "lives": {"type": "integer"}},
                       "required": ["pet", "lives"]},
               "dog": {"type": "object", "properties": {"pet": {"enum": ["dog", "puppy"]}, "bark": {"type": "boolean"}},
                       "required": ["pet"]}},
     "oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}]},
    {"oneOf": [{"enum": ["a", "b", 1]}, {"enum": ["c", 2.5, None]}]},
]

BAD = [
    ({"schema": {"oneOf": [{"type": "number"}, {"type": "integer"}]}, "strict": True},
     "#: 'oneOf' branches 0 and 1 may both match"),
    ({"schema": {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                           {"type": "object", "properties": {"b": {"type": "string"}}}]}, "strict": True},
     "'oneOf' branches 0 and 1 may both match"),
    ({"schema": {"oneOf": [{"enum": ["x", "y"]}, {"type": "null"}, {"enum": ["z", "x"]}]}, "strict": True},
     "'oneOf' branches 0 and 2 may both match"),
    ({"schema": {"oneOf": [{"type": "null"}], "anyOf": [{"type": "null"}]}, "strict": True},
     "'anyOf' and 'oneOf' together"),
    ({"gbnf": "root ::= \"a\" ( \"b\""}, "expected ')'"),
    ({"gbnf": "root ::= x\nx ::= x \"a\""}, "left-recursive"),
    ({"gbnf": "root ::= nothere"}, "nothere"),
    ({"gbnf": "start ::= \"a\""}, "root"),
    ({"gbnf": "root ::= [z-a]"}, "line 1"),
    ({"schema": {"type": "object", "properties": {"a": {"type": "string", "not": {}}}}, "strict": True},
     "#/properties/a: unsupported keyword 'not'"),
    ({"schema": {"type": "array", "items": {"$ref": "#/$defs/missing"}}}, "#/items: '$ref' #/$defs/missing"),
    ({"schema": {"type": "string", "pattern": "(a"}}, "#/pattern: regex at offset"),
    ({"schema": {"type": "string", "pattern": "a(?=b)"}}, "lookahead"),
    ({"schema": {"type": "number", "minimum": 0.5}}, "whole numbers"),
    ({"schema": {"type": "integer", "minimum": 5, "maximum": 4}}, "no integer"),
    ({"schema": {"type": "wat"}}, "unknown type"),
    ({"schema": {"$ref": "http://example.com/s.json"}}, "only local"),
    ({"regex": "a(b"}, "offset"),
    ({"regex": "(a)\\1"}, "backreferences"),
    ({"regex": "\\bx"}, "word boundaries"),
]


class Checker:
    def __init__(self, tool):
        self.p = subprocess.Popen([tool], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.failures = 0
        self.checks = 0

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("check_gram: gram_check died")
        return json.loads(line)

    def fail(self, what):
        self.failures += 1
        print("FAIL:", what)

    def expect(self, cond, what):
        self.checks += 1
        if not cond:
            self.fail(what)


def mutate(s, rng, alphabet):
    out = []
    for _ in range(6):
        t = list(s)
        k = rng.randrange(3)
        i = rng.randrange(len(t) + 1)
        if k == 0 and t:
            del t[min(i, len(t) - 1)]
        elif k == 1:
            t.insert(i, rng.choice(alphabet))
        elif t:
            t[min(i, len(t) - 1)] = rng.choice(alphabet)
        out.append("".join(t))
    return out


def json_valid(text, schema):
    try:
        x = json.loads(text)
    except ValueError:
        return False
    return js.validate(x, schema)


def check_schemas(c, rng, walks):
    alphabet = list('{}[],:" 0123456789.-eEtrufalsn\\xaé日') + ["\n"]
    for schema in SCHEMAS + ONE_OF:
        strict = any(schema is x for x in ONE_OF)
        name = json.dumps(schema)[:70]
        valid_texts = []
        for _ in range(12):
            x = js.generate(schema, rng)
            assert js.validate(x, schema), ("generator", schema, x)
            valid_texts.append(json.dumps(x, ensure_ascii=False))
            valid_texts.append(json.dumps(x, ensure_ascii=False, separators=(",", ":")))
        cands = list(valid_texts)
        for t in valid_texts[:8]:
            cands += mutate(t, rng, alphabet)
        cands += ["", "null", "1", '"x"', "{}", "[]", '{"a":1}', "[1,2]", "true", "1.5", "-0", "01"]
        r = c.ask({"schema": schema, "strict": strict, "accept": cands, "walks": walks,
                   "seed": rng.randrange(1 << 30)})
        if "error" in r:
            c.fail("schema %s: %s" % (name, r["error"]))
            continue
        for s, acc in zip(cands, r["accepted"]):
            if acc:
                c.expect(json_valid(s, schema), "schema %s accepted an invalid %r" % (name, s))
        for s in valid_texts:
            c.expect(r["accepted"][cands.index(s)], "schema %s refused the valid %r" % (name, s))
        done = [w for w in r["walks"] if w is not None]
        for w in done:
            c.expect(json_valid(w, schema), "schema %s walked to an invalid %r" % (name, w))
        # an unanchored pattern ends only after a uniform walk happens to
        # spell it: those walks are checked for validity, not for ending
        if not (isinstance(schema, dict) and not schema.get("pattern", "^").startswith("^")):
            c.expect(len(done) >= walks // 4, "schema %s: only %d of %d walks ended" % (name, len(done), walks))
    # json_object: any object
    r = c.ask({"json_object": True, "accept": ['{"a": [1, {"b": null}]}', "[]", '{"x":1,}'], "walks": walks, "seed": 5})
    c.expect(r["accepted"] == [True, False, False], "json_object acceptance %r" % r.get("accepted"))
    for w in r["walks"]:
        if w is not None:
            try:
                c.expect(isinstance(json.loads(w), dict), "json_object walked to a non-object %r" % w)
            except ValueError:
                c.fail("json_object walked to invalid JSON %r" % w)


def check_regexes(c, rng, walks):
    for pat, pos in REGEXES:
        alphabet = sorted(set("".join(pos) + "abz0 \n\"\\"))
        cands = list(pos)
        for p in pos:
            cands += mutate(p, rng, alphabet)
        for _ in range(60):
            cands.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(7))))
        r = c.ask({"regex": pat, "accept": cands, "walks": walks, "seed": rng.randrange(1 << 30)})
        if "error" in r:
            c.fail("regex %r: %s" % (pat, r["error"]))
            continue
        for s, acc in zip(cands, r["accepted"]):
            ref = re.fullmatch(pat, s) is not None
            c.expect(acc == ref, "regex %r on %r: inferd %s, python %s" % (pat, s, acc, ref))
        for w in r["walks"]:
            if w is not None:
                c.expect(re.fullmatch(pat, w) is not None, "regex %r walked to %r" % (pat, w))
    choices = ["yes", "no", "maybe \"so\"", "日本"]
    r = c.ask({"choice": choices, "accept": choices + ["ye", "yesno", ""], "walks": walks, "seed": 3})
    c.expect(r["accepted"] == [True] * 4 + [False] * 3, "choice acceptance %r" % r.get("accepted"))
    for w in r["walks"]:
        c.expect(w is None or w in choices, "choice walked to %r" % w)


def check_gbnf(c, rng, walks):
    for text, ref, example in GBNFS:
        pred = (lambda s, ref=ref: re.fullmatch(ref, s) is not None) if isinstance(ref, str) else ref
        alphabet = sorted(set(example + "az0()\"\\,"))
        cands = [example] + mutate(example, rng, alphabet)
        for _ in range(80):
            cands.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(8))))
        r = c.ask({"gbnf": text, "accept": cands, "walks": walks, "seed": rng.randrange(1 << 30)})
        if "error" in r:
            c.fail("gbnf %r: %s" % (text, r["error"]))
            continue
        c.expect(r["accepted"][0], "gbnf %r refused its example %r" % (text, example))
        for s, acc in zip(cands, r["accepted"]):
            c.expect(acc == pred(s), "gbnf %r on %r: inferd %s, reference %s" % (text, s, acc, pred(s)))
        for w in r["walks"]:
            if w is not None:
                c.expect(pred(w), "gbnf %r walked to %r" % (text, w))


def check_errors(c):
    for req, needle in BAD:
        r = c.ask(dict(req, accept=[]))
        c.expect("error" in r and needle in r["error"],
                 "%s: expected an error naming %r, got %r" % (json.dumps(req)[:80], needle, r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--walks", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    c = Checker(os.path.join(a.build, "gram_check"))
    check_gbnf(c, rng, a.walks)
    check_regexes(c, rng, a.walks)
    check_schemas(c, rng, a.walks)
    check_errors(c)
    c.p.stdin.close()
    c.p.wait()
    print("check_gram: %d checks, %d failures" % (c.checks, c.failures))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
