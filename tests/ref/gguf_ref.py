#!/usr/bin/python3
"""GGUF for the tests, written from the GGUF specification and ggml's block
definitions, in numpy only (no code shared with inferd or llama.cpp):

  * write_gguf: a GGUF v3 file (metadata, tensor infos, aligned data);
  * from_hf: a Llama safetensors directory as a llama.cpp-style GGUF
    (llama.* metadata, token_embd / blk.N.* names, attn_q / attn_k rows
    permuted as llama.cpp's converter does), tensors of a chosen type;
  * dequant: each block type to float32, as the format defines it;
  * quantizers for every type here: simple ones (min/max
    scales, not ggml's search), enough to make valid blocks of real weights.

Block formats (little-endian; f16 = IEEE half):
  Q8_0  32 values, 34 bytes: f16 d, int8 q[32];                 x = d * q
  Q4_0  32 values, 18 bytes: f16 d, u8 qs[16]; q[i] = qs[i] & 15, q[i+16] =
        qs[i] >> 4 (i < 16);                                     x = (q - 8) * d
  Q4_K  256 values, 144 bytes: f16 d, f16 dmin, u8 scales[12], u8 qs[128].
        8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j]: for j < 4
        sc = scales[j] & 63, m = scales[j+4] & 63; for j >= 4 sc =
        (scales[j+4] & 15) | (scales[j-4] >> 6) << 4, m = (scales[j+4] >> 4) |
        (scales[j] >> 6) << 4. Value 64c + l (l < 32) is qs[32c + l] & 15 in
        sub-block 2c, value 64c + 32 + l is qs[32c + l] >> 4 in sub-block 2c+1;
        x = (d * sc) * q - (dmin * m), in float32.
  Q5_K  256 values, 176 bytes: f16 d, f16 dmin, u8 scales[12], u8 qh[32],
        u8 qs[128]: as Q4_K with a fifth bit (16): bit 2c of qh[l] for value
        64c + l, bit 2c+1 for value 64c + 32 + l.
  Q6_K  256 values, 210 bytes: u8 ql[128], u8 qh[64], int8 scales[16], f16 d.
        For half h and l < 32 (ql from 64h, qh from 32h): value 128h + l is
        ql[l] & 15 | (qh[l] & 3) << 4, + 32: ql[l+32] & 15 | (qh[l] >> 2 & 3) << 4,
        + 64: ql[l] >> 4 | (qh[l] >> 4 & 3) << 4, + 96: ql[l+32] >> 4 |
        (qh[l] >> 6) << 4; value v's scale is scales[v // 16];
        x = (d * sc) * (q - 32), in float32.
  Q4_1  32 values, 20 bytes: f16 d, f16 m, u8 qs[16] (codes as Q4_0's);
        x = q * d + m, in float32.
  Q5_0  32 values, 22 bytes: f16 d, u8 qh[4] (a little-endian u32), u8 qs[16]:
        Q4_0's codes with bit i of qh as value i's fifth bit (16);
        x = (q - 16) * d.
  Q5_1  32 values, 24 bytes: f16 d, f16 m, qh[4], qs[16]; x = q * d + m.
  Q2_K  256 values, 84 bytes: u8 scales[16], u8 qs[64], f16 d, f16 dmin.
        Value v = 128h + 32p + l (l < 32) has the 2-bit code
        (qs[32h + l] >> 2p) & 3; sub-block s = v // 16 has scale
        scales[s] & 15 and min scales[s] >> 4; x = (d * sc) * q - (dmin * m).
  Q3_K  256 values, 110 bytes: u8 hmask[32], u8 qs[64], u8 scales[12], f16 d.
        Q2_K's 2-bit code, minus 4 when bit 4h + p of hmask[l] is clear;
        sub-block s's 6-bit scale: low 4 bits from scales[s % 8] (low nibble
        for s < 8, high for s >= 8), high 2 bits from scales[8 + s % 4], bits
        2(s // 4) and up; x = (d * (sc - 32)) * q.
  IQ4_NL 32 values, 18 bytes: f16 d, u8 qs[16] (codes as Q4_0's), each an
        index into the 16 levels NL (ggml's kvalues_iq4nl); x = d * NL[q].
  IQ4_XS 256 values, 136 bytes: f16 d, u16 scales_h, u8 scales_l[4],
        u8 qs[128]: sub-block b (32 values, qs[16b..16b+15] as IQ4_NL's) has
        the 6-bit scale (scales_l[b // 2] >> 4(b % 2)) & 15 | ((scales_h >> 2b)
        & 3) << 4; x = (d * (sc - 32)) * NL[q].
"""
import json
import os
import struct

import numpy as np

ALIGN = 32
TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10,
         "Q3_K": 11, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "IQ4_NL": 20, "IQ4_XS": 23, "BF16": 30}
NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
BLOCK = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18),
         "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q2_K": (256, 84),
         "Q3_K": (256, 110), "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210),
         "IQ4_NL": (32, 18), "IQ4_XS": (256, 136)}
V_U16, V_U32, V_I32, V_F32, V_BOOL, V_STRING, V_ARRAY = 2, 4, 5, 6, 7, 8, 9


# ---------------------------------------------------------------- container

def _str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == V_U16:
        return struct.pack("<H", v)
    if vtype == V_U32:
        return struct.pack("<I", v)
    if vtype == V_I32:
        return struct.pack("<i", v)
    if vtype == V_F32:
        return struct.pack("<f", v)
    if vtype == V_BOOL:
        return struct.pack("<B", 1 if v else 0)
    if vtype == V_STRING:
        return _str(v)
    if vtype == V_ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, x) for x in items)
    raise ValueError(vtype)


def write_gguf(path, kvs, tensors, version=3):
    """kvs: [(key, vtype, value)]; tensors: [(name, type name, ne list
    (innermost first), raw bytes)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += _str(k) + struct.pack("<I", t) + _value(t, v)
    off, data = 0, []  # joined once: a model-sized file is written piece by piece
    for name, tname, ne, raw in tensors:
        head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        head += struct.pack("<IQ", TYPES[tname], off)
        pad = (-len(raw)) % ALIGN
        data += [raw, b"\0" * pad]
        off += len(raw) + pad
    head += b"\0" * ((-len(head)) % ALIGN)
    with open(path, "wb") as f:
        f.write(head)
        for chunk in data:
            f.write(chunk)
    return len(head)


def split_paths(prefix, n):
    """llama.cpp's names of a model split in n files."""
    return [f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf" for i in range(n)]


def split_keys(no, n, n_tensors):
    """The keys gguf-split writes in file no (from 0) of n."""
    return [("split.no", V_U16, no), ("split.count", V_U16, n), ("split.tensors.count", V_I32, n_tensors)]


def write_gguf_split(prefix, kvs, tensors, n, first_empty=False):
    """The model as llama.cpp's gguf-split writes it in n files: the
    tensors in order, about as many in each (first_empty: none in the
    first, its --no-tensor-in-metadata); every file has split.no (u16),
    split.count (u16) and split.tensors.count (i32), the first also every
    other key. Returns the paths."""
    paths = split_paths(prefix, n)
    holders = n - 1 if first_empty else n
    per = -(-len(tensors) // holders)
    for i, path in enumerate(paths):
        j = i - 1 if first_empty else i
        part = [] if j < 0 else tensors[j * per:(j + 1) * per]
        write_gguf(path, (list(kvs) if i == 0 else []) + split_keys(i, n, len(tensors)), part)
    return paths


# ---------------------------------------------------------------- dequantization

def _f16(b):
    return np.frombuffer(b.tobytes(), "<f2").astype(np.float32)


def dequant(tname, raw, n):
    """n values of type tname from raw bytes, as float32."""
    f32 = np.float32
    if tname == "F32":
        return np.frombuffer(raw, "<f4", n).copy()
    if tname == "F16":
        return np.frombuffer(raw, "<f2", n).astype(f32)
    if tname == "BF16":
        return (np.frombuffer(raw, "<u2", n).astype(np.uint32) << 16).view(f32)
    per, size = BLOCK[tname]
    b = np.frombuffer(raw, np.uint8, n // per * size).reshape(-1, size)
    if tname == "Q8_0":
        d = _f16(b[:, :2])[:, None]
        return (d * b[:, 2:].view(np.int8).astype(f32)).reshape(-1)
    if tname == "Q4_0":
        d = _f16(b[:, :2])[:, None]
        qs = b[:, 2:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32) - 8
        return (q.astype(f32) * d).reshape(-1)
    if tname in ("Q4_1", "Q5_0", "Q5_1"):
        d = _f16(b[:, 0:2])[:, None]
        m = _f16(b[:, 2:4])[:, None] if tname != "Q5_0" else None
        o = 2 if tname == "Q5_0" else 4
        qs = b[:, -16:]
        q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)
        if tname != "Q4_1":
            qh = b[:, o:o + 4].copy().view("<u4").astype(np.int64)
            q = q | (((qh >> np.arange(32)) & 1) << 4).astype(np.int32)
        if m is None:
            return ((q - 16).astype(f32) * d).reshape(-1)
        return (q.astype(f32) * d + m).reshape(-1)
    if tname in ("IQ4_NL", "IQ4_XS"):
        d = _f16(b[:, 0:2])[:, None]
        qs = b[:, 2:] if tname == "IQ4_NL" else b[:, 8:]
        qs = qs.reshape(len(b), -1, 16)  # sub-blocks of 32 values
        q = np.concatenate([qs & 15, qs >> 4], axis=2).astype(np.int64)
        if tname == "IQ4_NL":
            return (d * NL[q[:, 0]]).reshape(-1)
        sh = b[:, 2:4].copy().view("<u2").astype(np.int64)
        sub = np.arange(8)
        ls = ((b[:, 4 + sub // 2].astype(np.int64) >> (4 * (sub % 2))) & 15) | (((sh >> (2 * sub)) & 3) << 4)
        dl = d * (ls - 32).astype(f32)
        return (dl[:, :, None] * NL[q]).reshape(-1)
    if tname in ("Q2_K", "Q3_K"):
        v = np.arange(256)
        h, w = v // 128, v % 128
        if tname == "Q2_K":
            scales, qs = b[:, :16].astype(np.int32), b[:, 16:80].astype(np.int32)
            d, dmin = _f16(b[:, 80:82])[:, None], _f16(b[:, 82:84])[:, None]
        else:
            hmask, qs, sc8 = b[:, :32].astype(np.int32), b[:, 32:96].astype(np.int32), b[:, 96:108].astype(np.int32)
            d = _f16(b[:, 108:110])[:, None]
        q = (qs[:, 32 * h + w % 32] >> (2 * (w // 32))) & 3
        s = v // 16
        if tname == "Q2_K":
            sc, mn = (scales & 15)[:, s].astype(f32), (scales >> 4)[:, s].astype(f32)
            return ((d * sc) * q.astype(f32) - dmin * mn).reshape(-1)
        q = q - np.where((hmask[:, w % 32] >> (4 * h + w // 32)) & 1, 0, 4)
        sub = np.arange(16)
        low = (sc8[:, sub % 8] >> (4 * (sub // 8))) & 15
        high = (sc8[:, 8 + sub % 4] >> (2 * (sub // 4))) & 3
        sc = ((low | (high << 4)) - 32).astype(f32)
        return ((d * sc[:, s]) * q.astype(f32)).reshape(-1)
    if tname in ("Q4_K", "Q5_K"):
        d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
        sc8 = b[:, 4:16].astype(np.int32)
        sc = np.zeros((len(b), 8), np.int32)
        mn = np.zeros((len(b), 8), np.int32)
        for j in range(8):
            if j < 4:
                sc[:, j], mn[:, j] = sc8[:, j] & 63, sc8[:, j + 4] & 63
            else:
                sc[:, j] = (sc8[:, j + 4] & 15) | ((sc8[:, j - 4] >> 6) << 4)
                mn[:, j] = (sc8[:, j + 4] >> 4) | ((sc8[:, j] >> 6) << 4)
        qh = b[:, 16:48].astype(np.int32) if tname == "Q5_K" else None
        qs = b[:, 48:].astype(np.int32) if tname == "Q5_K" else b[:, 16:].astype(np.int32)
        out = np.zeros((len(b), 256), f32)
        for c in range(4):
            for half in range(2):
                j = 2 * c + half
                q = (qs[:, 32 * c:32 * c + 32] >> (4 * half)) & 15
                if qh is not None:
                    q = q + ((qh >> j) & 1) * 16
                d1 = (d * sc[:, j].astype(f32))[:, None]
                m1 = (dmin * mn[:, j].astype(f32))[:, None]
                out[:, 64 * c + 32 * half:64 * c + 32 * half + 32] = d1 * q.astype(f32) - m1
        return out.reshape(-1)
    if tname == "Q6_K":
        ql, qh = b[:, :128].astype(np.int32), b[:, 128:192].astype(np.int32)
        scales = b[:, 192:208].view(np.int8).astype(f32)
        d = _f16(b[:, 208:210])
        q = np.zeros((len(b), 256), np.int32)
        for h in range(2):
            L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
            q[:, 128 * h:128 * h + 32] = (L[:, :32] & 15) | ((H & 3) << 4)
            q[:, 128 * h + 32:128 * h + 64] = (L[:, 32:] & 15) | (((H >> 2) & 3) << 4)
            q[:, 128 * h + 64:128 * h + 96] = (L[:, :32] >> 4) | (((H >> 4) & 3) << 4)
            q[:, 128 * h + 96:128 * h + 128] = (L[:, 32:] >> 4) | (((H >> 6) & 3) << 4)
        sc = np.repeat(scales, 16, axis=1)
        return ((d[:, None] * sc) * (q - 32).astype(f32)).reshape(-1)
    raise ValueError(tname)


# ---------------------------------------------------------------- quantization

def q4_0_codes(raw, n):
    """Q4_0 bytes of n values as their codes [n / 32, 32] in [0, 15] and
    scales (float16) [n / 32]: value = d * (code - 8)."""
    b = np.frombuffer(raw, np.uint8)[:n // 32 * 18].reshape(-1, 18)
    qs = b[:, 2:]
    return np.concatenate([qs & 15, qs >> 4], 1), b[:, :2].copy().view("<f2")[:, 0]


def _h(x):
    return np.asarray(x, np.float32).astype("<f2")


def _pack_scales(sc, mn):
    """8 six-bit scales and mins per row into the 12 bytes Q4_K/Q5_K read."""
    out = np.zeros((len(sc), 12), np.uint8)
    for j in range(4):
        out[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        out[:, j + 4] = (mn[:, j] & 63) | ((mn[:, j + 4] >> 4) << 6)
        out[:, j + 8] = (sc[:, j + 4] & 15) | ((mn[:, j + 4] & 15) << 4)
    return out


def quantize(tname, x):
    """float values (a multiple of the block) -> raw bytes of type tname."""
    x = np.asarray(x, np.float32).reshape(-1)
    if tname == "F32":
        return x.astype("<f4").tobytes()
    if tname == "F16":
        return x.astype("<f2").tobytes()
    if tname == "BF16":
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
    per, size = BLOCK[tname]
    g = x.reshape(-1, per)
    n = len(g)
    if tname == "Q8_0":
        d = _h(np.abs(g).max(1) / 127)
        df = d.astype(np.float32)
        q = np.clip(np.rint(g / np.where(df == 0, 1, df)[:, None]), -127, 127).astype(np.int8)
        return np.concatenate([d.view(np.uint8).reshape(n, 2), q.view(np.uint8)], 1).tobytes()
    if tname == "Q4_0":
        i = np.abs(g).argmax(1)
        d = _h(g[np.arange(n), i] / -8)
        df = d.astype(np.float32)
        q = np.clip(np.rint(g / np.where(df == 0, 1, df)[:, None]) + 8, 0, 15).astype(np.uint8)
        qs = q[:, :16] | (q[:, 16:] << 4)
        return np.concatenate([d.view(np.uint8).reshape(n, 2), qs], 1).tobytes()
    if tname in ("Q4_1", "Q5_1", "Q5_0"):
        top = 15 if tname == "Q4_1" else 31
        if tname == "Q5_0":  # centred: x = (q - 16) d, the largest |x| at q = 0
            i = np.abs(g).argmax(1)
            d = _h(g[np.arange(n), i] / -16)
            df = d.astype(np.float32)
            q = np.clip(np.rint(g / np.where(df == 0, 1, df)[:, None]) + 16, 0, 31).astype(np.int64)
            head = [d.view(np.uint8).reshape(n, 2)]
        else:
            lo, hi = g.min(1), g.max(1)
            d, m = _h((hi - lo) / top), _h(lo)
            df, mf = d.astype(np.float32), m.astype(np.float32)
            q = np.clip(np.rint((g - mf[:, None]) / np.where(df == 0, 1, df)[:, None]), 0, top).astype(np.int64)
            head = [d.view(np.uint8).reshape(n, 2), m.view(np.uint8).reshape(n, 2)]
        qs = (q[:, :16] & 15 | (q[:, 16:] & 15) << 4).astype(np.uint8)
        if tname == "Q4_1":
            return np.concatenate(head + [qs], 1).tobytes()
        qh = (((q >> 4) & 1) << np.arange(32)).sum(1).astype("<u4").view(np.uint8).reshape(n, 4)
        return np.concatenate(head + [qh, qs], 1).tobytes()
    if tname in ("IQ4_NL", "IQ4_XS"):
        s = g.reshape(n, -1, 32)  # sub-blocks of 32
        i = np.abs(s).argmax(2)
        sub = np.take_along_axis(s, i[:, :, None], 2)[:, :, 0] / -127  # the largest at level -127
        if tname == "IQ4_NL":
            d = _h(sub[:, 0])
            scale = d.astype(np.float32)[:, None, None]
            head = [d.view(np.uint8).reshape(n, 2)]
        else:
            d = _h(np.abs(sub).max(1) / 31)
            df = d.astype(np.float32)
            ls = np.clip(np.rint(sub / np.where(df == 0, 1, df)[:, None]), -32, 31).astype(np.int64) + 32
            scale = (df[:, None] * (ls - 32).astype(np.float32))[:, :, None]
            sh = (((ls >> 4) & 3) << (2 * np.arange(8))).sum(1).astype("<u2").view(np.uint8).reshape(n, 2)
            sl = ((ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)).astype(np.uint8)
            head = [d.view(np.uint8).reshape(n, 2), sh, sl]
        q = np.abs(s[..., None] / np.where(scale == 0, 1, scale)[..., None] - NL).argmin(-1)
        qs = (q[:, :, :16] | (q[:, :, 16:] << 4)).astype(np.uint8).reshape(n, -1)
        return np.concatenate(head + [qs], 1).tobytes()
    if tname in ("Q2_K", "Q3_K"):
        s = g.reshape(n, 16, 16)
        v = np.arange(256)
        h, w = v // 128, v % 128
        if tname == "Q2_K":  # x = (d sc) q - (dmin m), q in 0..3, sc and m in 0..15
            lo = np.minimum(s.min(2), 0)
            step = (s.max(2) - lo) / 3
            d, dmin = _h(step.max(1) / 15), _h(-lo.min(1) / 15)
            df, mf = d.astype(np.float32), dmin.astype(np.float32)
            sc = np.clip(np.rint(step / np.where(df == 0, 1, df)[:, None]), 0, 15).astype(np.int64)
            mn = np.clip(np.rint(-lo / np.where(mf == 0, 1, mf)[:, None]), 0, 15).astype(np.int64)
            scale = (df[:, None] * sc)[:, :, None]
            q = np.clip(np.rint((s + (mf[:, None] * mn)[:, :, None]) / np.where(scale == 0, 1, scale)), 0, 3)
            code = q.astype(np.int64).reshape(n, 256)
            head = [(sc | mn << 4).astype(np.uint8)]
        else:  # x = (d (sc - 32)) q, q in -4..3, sc - 32 in -32..31
            i = np.abs(s).argmax(2)
            sub = np.take_along_axis(s, i[:, :, None], 2)[:, :, 0] / -4
            d = _h(np.abs(sub).max(1) / 31)
            df = d.astype(np.float32)
            sc = np.clip(np.rint(sub / np.where(df == 0, 1, df)[:, None]), -32, 31).astype(np.int64)
            scale = (df[:, None] * sc)[:, :, None]
            q = np.clip(np.rint(s / np.where(scale == 0, 1, scale)), -4, 3).astype(np.int64).reshape(n, 256)
            code = q + 4  # 3 bits: the high one set means "do not subtract 4"
            u = sc + 32
            sc12 = np.zeros((n, 12), np.int64)
            for k in range(16):
                sc12[:, k % 8] |= (u[:, k] & 15) << (4 * (k // 8))
                sc12[:, 8 + k % 4] |= ((u[:, k] >> 4) & 3) << (2 * (k // 4))
            hmask = np.zeros((n, 32), np.int64)
            np.add.at(hmask, (slice(None), w % 32), ((code >> 2) & 1) << (4 * h + w // 32))
        qs = np.zeros((n, 64), np.int64)
        np.add.at(qs, (slice(None), 32 * h + w % 32), (code & 3) << (2 * (w // 32)))
        if tname == "Q2_K":
            return np.concatenate(head + [qs.astype(np.uint8), d.view(np.uint8).reshape(n, 2),
                                          dmin.view(np.uint8).reshape(n, 2)], 1).tobytes()
        return np.concatenate([hmask.astype(np.uint8), qs.astype(np.uint8), sc12.astype(np.uint8),
                               d.view(np.uint8).reshape(n, 2)], 1).tobytes()
    if tname in ("Q4_K", "Q5_K"):
        top = 15 if tname == "Q4_K" else 31
        s = g.reshape(n, 8, 32)
        lo = np.minimum(s.min(2), 0)
        step = (s.max(2) - lo) / top
        d = _h(step.max(1) / 63)
        dmin = _h(-lo.min(1) / 63)
        df, mf = d.astype(np.float32), dmin.astype(np.float32)
        sc = np.clip(np.rint(step / np.where(df == 0, 1, df)[:, None]), 0, 63).astype(np.int32)
        mn = np.clip(np.rint(-lo / np.where(mf == 0, 1, mf)[:, None]), 0, 63).astype(np.int32)
        scale = (df[:, None] * sc)[:, :, None]
        q = np.rint((s + (mf[:, None] * mn)[:, :, None]) / np.where(scale == 0, 1, scale))
        q = np.clip(q, 0, top).astype(np.int32).reshape(n, 256)
        qs = np.zeros((n, 128), np.uint8)
        qh = np.zeros((n, 32), np.uint8)
        for c in range(4):
            a, b = q[:, 64 * c:64 * c + 32], q[:, 64 * c + 32:64 * c + 64]
            qs[:, 32 * c:32 * c + 32] = (a & 15) | ((b & 15) << 4)
            qh |= (((a >> 4) & 1) << (2 * c) | ((b >> 4) & 1) << (2 * c + 1)).astype(np.uint8)
        parts = [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2),
                 _pack_scales(sc, mn)] + ([qh] if tname == "Q5_K" else []) + [qs]
        return np.concatenate(parts, 1).tobytes()
    if tname == "Q6_K":
        s = g.reshape(n, 16, 16)
        i = np.abs(s).argmax(2)
        sub = np.take_along_axis(s, i[:, :, None], 2)[:, :, 0] / -32
        d = _h(np.abs(sub).max(1) / 127)
        df = d.astype(np.float32)
        sc = np.clip(np.rint(sub / np.where(df == 0, 1, df)[:, None]), -127, 127).astype(np.int8)
        scale = (df[:, None] * sc.astype(np.float32))[:, :, None]
        q = np.clip(np.rint(s / np.where(scale == 0, 1, scale)), -32, 31).astype(np.int32) + 32
        q = q.reshape(n, 256)
        ql = np.zeros((n, 128), np.uint8)
        qh = np.zeros((n, 64), np.uint8)
        for h in range(2):
            v = [q[:, 128 * h + 32 * k:128 * h + 32 * k + 32] for k in range(4)]
            ql[:, 64 * h:64 * h + 32] = (v[0] & 15) | ((v[2] & 15) << 4)
            ql[:, 64 * h + 32:64 * h + 64] = (v[1] & 15) | ((v[3] & 15) << 4)
            qh[:, 32 * h:32 * h + 32] = ((v[0] >> 4) | ((v[1] >> 4) << 2) | ((v[2] >> 4) << 4)
                                         | ((v[3] >> 4) << 6))
        return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], 1).tobytes()
    raise ValueError(tname)


# ---------------------------------------------------------------- from a safetensors model

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in head.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        dt = info["dtype"]
        if dt == "BF16":
            v = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            v = np.frombuffer(raw, {"F32": "<f4", "F16": "<f2"}[dt]).astype(np.float32)
        out[name] = v.reshape(info["shape"])
    return out


def load_hf(model_dir):
    files = [f for f in os.listdir(model_dir) if f.endswith(".safetensors")]
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(model_dir, f)))
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f), w


def permute(w, heads):
    """llama.cpp's converter: each head's rotate-half rows (i, i + hd/2)
    become adjacent rows (2i, 2i + 1)."""
    r = w.shape[0]
    return w.reshape(heads, 2, r // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
        "Qwen3ForCausalLM": "qwen3", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
        "Phi3ForCausalLM": "phi3"}
# Hugging Face's per-layer names -> llama.cpp's (GGUF's tensor naming)
PER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
       "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
       "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
       "post_attention_layernorm": "ffn_norm", "pre_feedforward_layernorm": "ffn_norm",
       "post_feedforward_layernorm": "post_ffw_norm", "mlp.gate_proj": "ffn_gate",
       "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def llama3_rope_factors(c, rot):
    """Llama 3.1's per-pair divisors of the angle (the published rescaling:
    long wavelengths / factor, short ones kept, a smooth blend between)."""
    rs = c["rope_scaling"]
    f, lo, hi, orig = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
        rs["original_max_position_embeddings"]
    out = []
    for i in range(rot // 2):
        wl = 2 * np.pi / c.get("rope_theta", 10000.0) ** (-2 * i / rot)
        if wl < orig / hi:
            out.append(1.0)
        elif wl > orig / lo:
            out.append(f)
        else:
            sm = (orig / wl - lo) / (hi - lo)
            out.append(1 / ((1 - sm) / f + sm))
    return np.asarray(out, np.float32)


def arch_kvs(c, arch, hd):
    """{arch}.* keys for config c; extra tensors (rope factors)."""
    H = c["num_attention_heads"]
    rot = int(hd * c.get("partial_rotary_factor", 1.0))
    k = [("general.architecture", V_STRING, arch),
         ("general.alignment", V_U32, ALIGN),
         (f"{arch}.context_length", V_U32, c.get("max_position_embeddings", 2048)),
         (f"{arch}.embedding_length", V_U32, c["hidden_size"]),
         (f"{arch}.block_count", V_U32, c["num_hidden_layers"]),
         (f"{arch}.feed_forward_length", V_U32, c["intermediate_size"]),
         (f"{arch}.attention.head_count", V_U32, H),
         (f"{arch}.attention.head_count_kv", V_U32, c.get("num_key_value_heads", H)),
         (f"{arch}.rope.freq_base", V_F32, c.get("rope_theta", 10000.0)),
         (f"{arch}.attention.layer_norm_rms_epsilon", V_F32, c.get("rms_norm_eps", 1e-6)),
         (f"{arch}.rope.dimension_count", V_U32, rot),
         (f"{arch}.vocab_size", V_U32, c["vocab_size"])]
    if hd * H != c["hidden_size"] or "head_dim" in c:
        k.append((f"{arch}.attention.key_length", V_U32, hd))
    extra = []
    rs = c.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind in ("linear", "yarn"):
        k += [(f"{arch}.rope.scaling.type", V_STRING, kind),
              (f"{arch}.rope.scaling.factor", V_F32, rs["factor"])]
        if kind == "yarn":
            k.append((f"{arch}.rope.scaling.original_context_length", V_U32,
                      rs["original_max_position_embeddings"]))
    elif kind == "llama3":
        extra.append(("rope_freqs.weight", llama3_rope_factors(c, rot)))
    elif kind == "longrope":
        orig = c.get("original_max_position_embeddings", rs.get("original_max_position_embeddings"))
        k.append((f"{arch}.rope.scaling.original_context_length", V_U32, orig))
        extra += [("rope_factors_short.weight", np.asarray(rs["short_factor"], np.float32)),
                  ("rope_factors_long.weight", np.asarray(rs["long_factor"], np.float32))]
    elif kind is not None:
        raise ValueError(f"rope_scaling {kind} has no GGUF form here")
    if arch.startswith("gemma"):
        for hf, g in (("attn_logit_softcapping", "attn_logit_softcapping"),
                      ("final_logit_softcapping", "final_logit_softcapping"),
                      ("sliding_window", "attention.sliding_window"),
                      ("sliding_window_pattern", "attention.sliding_window_pattern"),
                      ("rope_local_base_freq", "rope.freq_base_swa")):
            if c.get(hf) is not None:
                k.append((f"{arch}.{g}", V_F32 if isinstance(c[hf], float) else V_U32, c[hf]))
    return k, extra


def from_hf(model_dir, out, tname="F32", norm_type="F32", override=None, extra_kvs=(), quant=None,
            raws=None, split=0, contents=None):
    """model_dir's model as a GGUF at out, as llama.cpp's converter lays it
    out: {arch}.* metadata, token_embd / blk.N.* names, attn_q / attn_k rows
    permuted for llama, Gemma's norm gains stored as 1 + w (f32), Llama
    3.1's rope_freqs and Phi-3's rope_factors tensors; matrices in tname
    (norms in norm_type; override maps a GGUF tensor name to another type).
    quant(type, values) -> bytes replaces quantize (another quantizer's
    blocks of the same format); raws, a dict, receives {gguf name: (HF name,
    the tensor's bytes)}; split > 1: written in that many files as
    write_gguf_split does, out their prefix; contents, a dict, receives the
    file's "kvs" and "tensors" as write_gguf takes them. Returns {gguf name: (type,
    float32 values as the file holds them, HF shape)}."""
    c, w = load_hf(model_dir)
    arch = ARCH[c["architectures"][0]]
    H, KV = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or c["hidden_size"] // H
    kvs, extra = arch_kvs(c, arch, hd)
    kvs += list(extra_kvs)
    for key, name in (("bos_token_id", "tokenizer.ggml.bos_token_id"),
                      ("eos_token_id", "tokenizer.ggml.eos_token_id")):
        if isinstance(c.get(key), int):
            kvs.append((name, V_U32, c[key]))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per = dict(PER)
    if arch.startswith("gemma"):
        per["post_attention_layernorm"] = "post_attention_norm"
    tensors, held = [], {}
    for hf, v in w.items():
        if hf in names:
            g = names[hf]
        else:
            parts = hf.split(".")  # model.layers.N.<sub>.weight|bias
            g = f"blk.{parts[2]}.{per['.'.join(parts[3:-1])]}.{parts[-1]}"
        if arch == "llama" and g.endswith("attn_q.weight"):
            v = permute(v, H)
        elif arch == "llama" and g.endswith("attn_k.weight"):
            v = permute(v, KV)
        if arch.startswith("gemma") and g.endswith("norm.weight"):
            v = (v.astype(np.float32) + np.float32(1)).astype(np.float32)
        t = (override or {}).get(g, norm_type if v.ndim == 1 else tname)
        raw = (quant or quantize)(t, v)
        if raws is not None:
            raws[g] = (hf, raw)
        tensors.append((g, t, list(v.shape[::-1]), raw))
        held[g] = (t, dequant(t, raw, v.size).reshape(v.shape), v.shape)
    for g, v in extra:
        tensors.append((g, "F32", [v.size], v.astype("<f4").tobytes()))
    if contents is not None:
        contents.update(kvs=kvs, tensors=tensors)
    if split > 1:
        write_gguf_split(out, kvs, tensors, split)
    else:
        write_gguf(out, kvs, tensors)
    return held
