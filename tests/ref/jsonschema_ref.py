"""An independent JSON Schema (2020-12) validator and instance generator for
the keywords inferd's converter covers, written from the specification
(json-schema.org/draft/2020-12/json-schema-validation, RFC 3339 for
date/time formats, RFC 4122 for uuid), not from inferd's C code.

validate(instance, schema) -> bool
generate(schema, rng) -> a random valid instance
"""
import math
import re

# ------------------------------------------------------------------ formats

_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))$")


def _leap(y):
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def _date_ok(s):
    m = _DATE.match(s)
    if not m:
        return False
    y, mo, d = (int(g) for g in m.groups())
    if not 1 <= mo <= 12:
        return False
    days = [31, 29 if _leap(y) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]
    return 1 <= d <= days


def _time_ok(s):
    m = _TIME.match(s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or sec > 60:
        return False
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


def _format_ok(fmt, s):
    if fmt == "date":
        return _date_ok(s)
    if fmt == "time":
        return _time_ok(s)
    if fmt == "date-time":
        parts = re.split("[Tt]", s, maxsplit=1)
        return len(parts) == 2 and _date_ok(parts[0]) and _time_ok(parts[1])
    if fmt == "uuid":
        return re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s) is not None
    if fmt == "ipv4":
        parts = s.split(".")
        return len(parts) == 4 and all(re.fullmatch(r"0|[1-9]\d{0,2}", p) and int(p) <= 255 for p in parts)
    return True  # other formats are annotations


# --------------------------------------------------------------- validation

def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _type_ok(t, x):
    if t == "null":
        return x is None
    if t == "boolean":
        return isinstance(x, bool)
    if t == "object":
        return isinstance(x, dict)
    if t == "array":
        return isinstance(x, list)
    if t == "string":
        return isinstance(x, str)
    if t == "number":
        return _is_num(x)
    if t == "integer":
        return _is_num(x) and (isinstance(x, int) or (math.isfinite(x) and x == int(x)))
    raise ValueError(t)


def json_equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_num(a) and _is_num(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) == type(b) and a == b


def resolve(root, ref):
    assert ref.startswith("#")
    cur = root
    for seg in ref[1:].split("/")[1:]:
        seg = seg.replace("~1", "/").replace("~0", "~")
        cur = cur[int(seg)] if isinstance(cur, list) else cur[seg]
    return cur


def validate(x, s, root=None):
    root = s if root is None else root
    if s is True:
        return True
    if s is False:
        return False
    if "$ref" in s and not validate(x, resolve(root, s["$ref"]), root):
        return False
    t = s.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        if not any(_type_ok(tt, x) for tt in ts):
            return False
    if "enum" in s and not any(json_equal(x, e) for e in s["enum"]):
        return False
    if "const" in s and not json_equal(x, s["const"]):
        return False
    if "anyOf" in s and not any(validate(x, sub, root) for sub in s["anyOf"]):
        return False
    if "oneOf" in s and sum(1 for sub in s["oneOf"] if validate(x, sub, root)) != 1:
        return False
    if "allOf" in s and not all(validate(x, sub, root) for sub in s["allOf"]):
        return False
    if _is_num(x):
        if "minimum" in s and not x >= s["minimum"]:
            return False
        if "maximum" in s and not x <= s["maximum"]:
            return False
        if "exclusiveMinimum" in s and not x > s["exclusiveMinimum"]:
            return False
        if "exclusiveMaximum" in s and not x < s["exclusiveMaximum"]:
            return False
    if isinstance(x, str):
        if "minLength" in s and len(x) < s["minLength"]:
            return False
        if "maxLength" in s and len(x) > s["maxLength"]:
            return False
        if "pattern" in s and not re.search(s["pattern"], x):
            return False
        if "format" in s and not _format_ok(s["format"], x):
            return False
    if isinstance(x, list):
        pre = s.get("prefixItems", [])
        for v, sub in zip(x, pre):
            if not validate(v, sub, root):
                return False
        if "items" in s and not all(validate(v, s["items"], root) for v in x[len(pre):]):
            return False
        if "minItems" in s and len(x) < s["minItems"]:
            return False
        if "maxItems" in s and len(x) > s["maxItems"]:
            return False
    if isinstance(x, dict):
        props = s.get("properties", {})
        for k, v in x.items():
            if k in props:
                if not validate(v, props[k], root):
                    return False
            elif "additionalProperties" in s and not validate(v, s["additionalProperties"], root):
                return False
        if any(k not in x for k in s.get("required", [])):
            return False
    return True


# --------------------------------------------------------------- generation

def _gen_string(s, rng):
    if "examples" in s:  # patterns: the test tables give examples
        return rng.choice(s["examples"])
    fmt = s.get("format")
    if fmt == "date":
        y = rng.randrange(0, 10000)
        mo = rng.randrange(1, 13)
        days = [31, 29 if _leap(y) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]
        return "%04d-%02d-%02d" % (y, mo, rng.randrange(1, days + 1))
    if fmt == "time":
        return "%02d:%02d:%02d%s" % (rng.randrange(24), rng.randrange(60), rng.randrange(60),
                                     rng.choice(["Z", "+05:30", ".123Z", "-11:00"]))
    if fmt == "date-time":
        return _gen_string({"format": "date"}, rng) + "T" + _gen_string({"format": "time"}, rng)
    if fmt == "uuid":
        h = "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(32))
        return "-".join([h[:8], h[8:12], h[12:16], h[16:20], h[20:]])
    if fmt == "ipv4":
        return ".".join(str(rng.randrange(256)) for _ in range(4))
    lo = s.get("minLength", 0)
    hi = s.get("maxLength", lo + 6)
    alphabet = "abc XYZ09_-é日😀\"\\\n/"
    if "minLength" in s or "maxLength" in s:  # inferd leaves out U+10000.. there
        alphabet = alphabet.replace("😀", "")
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(lo, hi + 1)))


def _gen_number(s, rng, integer):
    lo = s.get("minimum", s.get("exclusiveMinimum", -1000))
    hi = s.get("maximum", s.get("exclusiveMaximum", 1000))
    for _ in range(100):
        x = rng.randint(math.ceil(lo), math.floor(hi)) if integer else round(rng.uniform(lo, hi), 4)
        if not integer and rng.random() < 0.3:
            x = float(round(x))
        if validate(x, s):
            return x
    raise ValueError("no number found for %r" % s)


def generate(s, rng, root=None, depth=0):
    root = s if root is None else root
    if s is True:
        s = {}
    if "$ref" in s:
        return generate(resolve(root, s["$ref"]), rng, root, depth + 1)
    if "const" in s:
        return s["const"]
    if "enum" in s:
        return rng.choice(s["enum"])
    for kw in ("anyOf", "oneOf"):
        if kw in s:
            subs = s[kw]
            if depth > 6:  # prefer leaves on recursive schemas
                subs = [x for x in subs if "$ref" not in x] or subs
            return generate(rng.choice(subs), rng, root, depth + 1)
    if "allOf" in s:
        merged = {"type": "object", "properties": {}, "required": []}
        for sub in s["allOf"]:
            sub = resolve(root, sub["$ref"]) if "$ref" in sub else sub
            merged["properties"].update(sub.get("properties", {}))
            merged["required"] += sub.get("required", [])
        return generate(merged, rng, root, depth + 1)
    t = s.get("type")
    if isinstance(t, list):
        t = rng.choice(t)
    if t is None:
        t = "object" if "properties" in s else "array" if "items" in s or "prefixItems" in s else \
            rng.choice(["string", "number", "boolean", "null"])
    if t == "null":
        return None
    if t == "boolean":
        return rng.random() < 0.5
    if t == "string":
        return _gen_string(s, rng)
    if t in ("number", "integer"):
        return _gen_number(s, rng, t == "integer")
    if t == "array":
        pre = s.get("prefixItems", [])
        items = s.get("items", True)
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", max(lo, len(pre)) + 3)
        if items is False:
            hi = min(hi, len(pre))
        n = rng.randint(lo, hi) if depth < 6 else lo
        return [generate(pre[i] if i < len(pre) else items, rng, root, depth + 1) for i in range(n)]
    if t == "object":
        props = s.get("properties", {})
        req = s.get("required", [])
        # in the order inferd generates: required properties (in properties
        # order), required names without a schema, then optional ones
        out = {}
        for k, sub in props.items():
            if k in req:
                out[k] = generate(sub, rng, root, depth + 1)
        for k in req:
            if k not in out:
                out[k] = generate({}, rng, root, depth + 1)
        for k, sub in props.items():
            if k not in req and depth < 6 and rng.random() < 0.5:
                out[k] = generate(sub, rng, root, depth + 1)
        add = s.get("additionalProperties")
        if add not in (None, False) and rng.random() < 0.5:
            key = "x" + str(rng.randrange(100))
            if key not in props:
                out[key] = generate(add, rng, root, depth + 1)
        return out
    raise ValueError(t)
