#!/usr/bin/python3
"""tests/gguf_ref.py — an independent GGUF reader for the tests, written from the format's published description
(ggml's docs/gguf.md and the block layouts of ggml-common.h), numpy only: it shares no code with models/gguf.c or
kernels/quant*.c. Run by tests/models/check_gguf.c:

    gguf_ref.py check FILE SRC_DIR         parse FILE; re-serialise it from what was parsed and require the same
                                           bytes; dequantize every tensor and compare it with SRC_DIR's safetensors
                                           (the weights it was quantized from) within the type's own error bound
    gguf_ref.py all FILE SRC_DIR IDS OUT   check, then dequant into OUT.deq, then forward into OUT and OUT.act
    gguf_ref.py dequant FILE OUT           every tensor dequantized to little-endian f32, in file order, into OUT
    gguf_ref.py forward FILE IDS OUT       float64 forward pass of FILE's dequantized weights over the comma list
                                           IDS; OUT gets the logits as float64 (len(IDS) × vocab); OUT.act those
                                           of the same pass with every product's activations rounded as aahd's
                                           quantized products round them (Q8_0 / Q8_K blocks)
"""
import json
import math
import os
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
# value types: (struct format, size)
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
# ggml types: (name, values per block, bytes per block)
TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2), 8: ("Q8_0", 32, 34), 2: ("Q4_0", 32, 18),
         12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210)}


class Reader:
    def __init__(self, data):
        self.d = data
        self.at = 0

    def take(self, n):
        if self.at + n > len(self.d):
            raise ValueError(f"truncated at {self.at}")
        b = self.d[self.at:self.at + n]
        self.at += n
        return b

    def scalar(self, t):
        f = SCALARS[t]
        return struct.unpack(f, self.take(struct.calcsize(f)))[0]

    def string(self):
        n = self.scalar(10)
        return self.take(n).decode("utf-8")

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.scalar(4), self.scalar(10)
            return (et, [self.value(et) for _ in range(n)])
        return self.scalar(t)


def parse(data):
    """{version, kv: [(key, type, value)], tensors: [(name, ne, type, offset)], alignment, data_start}"""
    r = Reader(data)
    if r.take(4) != GGUF_MAGIC:
        raise ValueError("no GGUF magic")
    version, n_t, n_kv = r.scalar(4), r.scalar(10), r.scalar(10)
    kv = []
    for _ in range(n_kv):
        key = r.string()
        t = r.scalar(4)
        kv.append((key, t, r.value(t)))
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.scalar(4)
        ne = [r.scalar(10) for _ in range(nd)]
        tensors.append((name, ne, r.scalar(4), r.scalar(10)))
    align = dict((k, v) for k, _, v in kv).get("general.alignment", 32)
    start = (r.at + align - 1) // align * align
    return {"version": version, "kv": kv, "tensors": tensors, "alignment": align, "data_start": start,
            "header_end": r.at}


def nbytes(ne, t):
    _, bl, bb = TYPES[t]
    assert ne[0] % bl == 0
    return int(np.prod(ne)) // bl * bb


def serialise(g, data):
    """The file again from the parsed structure (and the tensor bytes), as the description lays it out."""
    out = bytearray(GGUF_MAGIC)

    def put_scalar(t, v):
        out.extend(struct.pack(SCALARS[t], v))

    def put_string(s):
        b = s.encode("utf-8")
        put_scalar(10, len(b))
        out.extend(b)

    def put_value(t, v):
        if t == STRING:
            put_string(v)
        elif t == ARRAY:
            et, items = v
            put_scalar(4, et)
            put_scalar(10, len(items))
            for x in items:
                put_value(et, x)
        else:
            put_scalar(t, v)

    put_scalar(4, g["version"])
    put_scalar(10, len(g["tensors"]))
    put_scalar(10, len(g["kv"]))
    for key, t, v in g["kv"]:
        put_string(key)
        put_scalar(4, t)
        put_value(t, v)
    for name, ne, t, off in g["tensors"]:
        put_string(name)
        put_scalar(4, len(ne))
        for x in ne:
            put_scalar(10, x)
        put_scalar(4, t)
        put_scalar(10, off)
    a = g["alignment"]
    for name, ne, t, off in g["tensors"]:
        while (len(out) - g["data_start"]) % a or len(out) < g["data_start"]:
            out.append(0)
        assert len(out) - g["data_start"] == off, f"{name}: offset {off} is not where the description puts it"
        s = g["data_start"] + off
        out.extend(data[s:s + nbytes(ne, t)])
    return bytes(out)


def f16(b):
    return np.frombuffer(b, dtype="<f2").astype(np.float32)


def scale_min_k4(sc):
    """(8 scales, 8 mins) from the 12 packed bytes of each block: sc is (nb, 12) uint8."""
    s = np.zeros((sc.shape[0], 8), np.uint8)
    m = np.zeros((sc.shape[0], 8), np.uint8)
    for j in range(8):
        if j < 4:
            s[:, j] = sc[:, j] & 63
            m[:, j] = sc[:, j + 4] & 63
        else:
            s[:, j] = (sc[:, j + 4] & 0xF) | ((sc[:, j - 4] >> 6) << 4)
            m[:, j] = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
    return s.astype(np.float32), m.astype(np.float32)


def dequant(b, t, n):
    """n values of type t from bytes b, as float32 computed in ggml's order (d·sc first, then ·q, then − dmin·m)."""
    name, bl, bb = TYPES[t]
    if name == "F32":
        return np.frombuffer(b, "<f4").copy()
    if name == "F16":
        return f16(b)
    if name == "BF16":
        return (np.frombuffer(b, "<u2").astype(np.uint32) << 16).view(np.float32)
    nb = n // bl
    a = np.frombuffer(b, np.uint8).reshape(nb, bb)
    if name == "Q8_0":
        d = f16(a[:, 0:2].tobytes())[:, None]
        return (d * a[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
    if name == "Q4_0":
        d = f16(a[:, 0:2].tobytes())[:, None]
        qs = a[:, 2:18]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32) - 8
        return (q.astype(np.float32) * d).reshape(-1)
    if name in ("Q4_K", "Q5_K"):
        d = f16(a[:, 0:2].tobytes())[:, None]
        dmin = f16(a[:, 2:4].tobytes())[:, None]
        s, m = scale_min_k4(a[:, 4:16])
        if name == "Q4_K":
            qh, qs = None, a[:, 16:144]
        else:
            qh, qs = a[:, 16:48], a[:, 48:176]
        y = np.zeros((nb, 256), np.float32)
        for j in range(4):
            ql = qs[:, 32 * j:32 * j + 32]
            lo, hi = (ql & 0xF).astype(np.float32), (ql >> 4).astype(np.float32)
            if qh is not None:
                lo += ((qh >> (2 * j)) & 1).astype(np.float32) * 16
                hi += ((qh >> (2 * j + 1)) & 1).astype(np.float32) * 16
            d1, m1 = d * s[:, 2 * j:2 * j + 1], dmin * m[:, 2 * j:2 * j + 1]
            d2, m2 = d * s[:, 2 * j + 1:2 * j + 2], dmin * m[:, 2 * j + 1:2 * j + 2]
            y[:, 64 * j:64 * j + 32] = d1 * lo - m1
            y[:, 64 * j + 32:64 * j + 64] = d2 * hi - m2
        return y.reshape(-1)
    if name == "Q6_K":
        ql, qh, sc = a[:, 0:128], a[:, 128:192], a[:, 192:208].view(np.int8).astype(np.float32)
        d = f16(a[:, 208:210].tobytes())[:, None]
        y = np.zeros((nb, 256), np.float32)
        for h in range(2):
            L, H, S = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32], sc[:, 8 * h:8 * h + 8]
            q = [(L[:, 0:32] & 0xF) | (((H >> 0) & 3) << 4), (L[:, 32:64] & 0xF) | (((H >> 2) & 3) << 4),
                 (L[:, 0:32] >> 4) | (((H >> 4) & 3) << 4), (L[:, 32:64] >> 4) | (((H >> 6) & 3) << 4)]
            for k in range(4):
                qq = q[k].astype(np.int32) - 32
                for half in range(2):   # 16 values per scale
                    ds = d * S[:, 2 * k + half:2 * k + half + 1]
                    y[:, 128 * h + 32 * k + 16 * half:128 * h + 32 * k + 16 * half + 16] = \
                        ds * qq[:, 16 * half:16 * half + 16].astype(np.float32)
        return y.reshape(-1)
    raise ValueError(name)


def tensors(path):
    data = open(path, "rb").read()
    g = parse(data)
    out = []
    for name, ne, t, off in g["tensors"]:
        s = g["data_start"] + off
        n = int(np.prod(ne))
        out.append((name, ne, t, dequant(data[s:s + nbytes(ne, t)], t, n).reshape(list(reversed(ne)))))
    return g, data, out


def safetensors(path):
    data = open(path, "rb").read()
    hl = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + hl])
    base = 8 + hl
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw = data[base + a:base + b]
        if v["dtype"] == "BF16":
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F16":
            x = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            x = np.frombuffer(raw, "<f4")
        out[k] = x.reshape(v["shape"])
    return out


HF = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
      "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
      "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
      "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
      "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "rope_freqs": "rope_freqs"}


def hf_name(name):
    parts = name.split(".")
    if parts[0] == "blk":
        return f"model.layers.{parts[1]}.{HF[parts[2]]}.{parts[3]}"
    return f"{HF[parts[0]]}.{parts[1]}"


# the worst error of one value as a fraction of its block's largest magnitude: half a step of the type's grid, plus
# the rounding of the half-float scales (Q4_0: a whole step, 1/8, at the end of its grid opposite the signed
# maximum, which lands on −8) (K types: the 6-bit sub-block scales and the least-squares fit can put a
# value up to about a step off; these bounds are loose enough for any block, tight enough that a wrong bit order,
# which scrambles values across the block, fails them)
BOUND = {"F32": 0, "F16": 1e-3, "BF16": 8e-3, "Q8_0": 1 / 127 * 0.5 + 2e-3, "Q4_0": 1 / 8 + 2e-3,
         "Q4_K": 2 / 15, "Q5_K": 2 / 31, "Q6_K": 1 / 32 + 4e-3}


def cmd_check(path, src):
    g, data, ts = tensors(path)
    again = serialise(g, data)
    assert again == data, f"re-serialised file differs ({len(again)} vs {len(data)} bytes)"
    print(f"ok    {path}: {len(data)} bytes re-serialised byte for byte from the parsed structure")
    ref = safetensors(os.path.join(src, "model.safetensors"))
    arch = dict((k, v) for k, _, v in g["kv"])["general.architecture"]
    kv = dict((k, v) for k, _, v in g["kv"])
    for name, ne, t, x in ts:
        if name == "rope_freqs.weight":   # Llama 3.1's factors: computed from config.json, not a source tensor
            continue
        want = ref.get(hf_name(name))
        if want is None and name == "token_embd.weight":
            want = ref["lm_head.weight"]
        assert want is not None, f"{name}: no source tensor {hf_name(name)}"
        if arch == "llama" and name.split(".")[-2] in ("attn_q", "attn_k"):
            heads = kv["llama.attention.head_count" if name.split(".")[-2] == "attn_q" else
                       "llama.attention.head_count_kv"]
            r = want.reshape(heads, 2, want.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(want.shape)
            want = r
        assert list(x.shape) == list(want.shape), f"{name}: shape {x.shape} vs {want.shape}"
        bl = TYPES[t][1]
        blocks_w = want.reshape(-1, bl) if bl > 1 else want.reshape(-1, 1)
        err = np.abs(x.reshape(blocks_w.shape) - blocks_w)
        scale = np.abs(blocks_w).max(axis=1, keepdims=True) if bl > 1 else np.maximum(np.abs(blocks_w), 2.0 ** -14)
        worst = float((err / np.maximum(scale, 1e-30)).max())
        assert worst <= BOUND[TYPES[t][0]], f"{name} ({TYPES[t][0]}): error {worst:.4g} of the block maximum"
    print(f"ok    {path}: {len(ts)} tensors dequantized within their type's bound of the source weights")


def cmd_dequant(path, out):
    _, _, ts = tensors(path)
    with open(out, "wb") as f:
        for _, _, _, x in ts:
            f.write(x.astype("<f4").tobytes())


def act_round(x, wtype):
    """x (rows, n) float64 as the activations of a product with weights of wtype reach it in aahd and llama.cpp's CPU
    path: rounded to Q8_0 blocks of 32 (for Q8_0 / Q4_0 weights) or Q8_K blocks of 256 (the K types), then widened;
    float weights take them as they are. The float32 arithmetic is the reference quantizers' (kernels/quant.h)."""
    name = TYPES[wtype][0]
    if name in ("F32", "F16", "BF16"):
        return x
    shape = x.shape
    if name in ("Q8_0", "Q4_0"):   # as llama.cpp's x86 quantize_row_q8_0: times 127 / amax, ties to even
        b = x.astype(np.float32).reshape(-1, 32)
        amax = np.abs(b).max(axis=1, keepdims=True)
        d = amax / np.float32(127)
        inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
        q = np.rint((b * inv).astype(np.float64))                  # the float32 product, rounded to nearest even
        return (d.astype(np.float16).astype(np.float32) * q).astype(np.float64).reshape(shape)
    b = x.astype(np.float32).reshape(-1, 256)
    idx = np.abs(b).argmax(axis=1)
    mx = b[np.arange(b.shape[0]), idx][:, None]
    safe = np.where(mx != 0, mx, 1).astype(np.float32)
    iscale = (np.float32(-127) / safe).astype(np.float32)
    q = np.minimum(127, np.rint(iscale * b))                      # nearest_int: ties to even
    d = (np.float32(1) / iscale).astype(np.float32)
    out = np.where(mx != 0, d * q, 0).astype(np.float32)
    return out.astype(np.float64).reshape(shape)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def cmd_forward(path, ids, out, emulate):
    g, _, ts = tensors(path)
    kv = dict((k, v) for k, _, v in g["kv"])
    a = kv["general.architecture"]
    W = {hf_name(n): x.astype(np.float64) for n, _, _, x in ts}
    WT = {hf_name(n): t for n, _, t, _ in ts}

    def mm(h, name, w=None):   # h @ W[name].T with the activations rounded as the product's weight type wants
        w = W[name] if w is None else w
        return (act_round(h, WT[name]) if emulate else h) @ w.T
    L, H, KV = kv[a + ".block_count"], kv[a + ".attention.head_count"], kv[a + ".attention.head_count_kv"]
    hidden = kv[a + ".embedding_length"]
    d = kv.get(a + ".attention.key_length", hidden // H)
    eps, theta = kv[a + ".attention.layer_norm_rms_epsilon"], kv.get(a + ".rope.freq_base", 10000.0)
    eps = float(np.float32(eps))
    theta = float(np.float32(theta))
    T = len(ids)
    x = W["model.embed_tokens.weight"][ids]
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if "rope_freqs.weight" in W:   # Llama 3.1 (llama3 scaling): ggml divides each frequency by its factor
        inv = inv / W["rope_freqs.weight"]
    mscale = 1.0
    scaling = kv.get(a + ".rope.scaling.type", "none")
    if scaling == "linear":
        inv = inv / kv[a + ".rope.scaling.factor"]
    elif scaling == "yarn":   # ggml's rope_yarn: ext_factor 1, corr dims floored / ceiled, mscale on cos and sin
        factor = kv[a + ".rope.scaling.factor"]
        n_orig = kv.get(a + ".rope.scaling.original_context_length", kv[a + ".context_length"])
        fast = kv.get(a + ".rope.scaling.yarn_beta_fast", 32.0)
        slow = kv.get(a + ".rope.scaling.yarn_beta_slow", 1.0)

        def corr_dim(n_rot):
            return d * math.log(n_orig / (n_rot * 2 * math.pi)) / (2 * math.log(theta))
        lo, hi = max(0.0, math.floor(corr_dim(fast))), min(d - 1.0, math.ceil(corr_dim(slow)))
        ramp = 1 - np.clip((np.arange(0, d, 2) / 2 - lo) / max(0.001, hi - lo), 0, 1)
        inv = inv / factor * (1 - ramp) + inv * ramp
        mscale = kv.get(a + ".rope.scaling.yarn_attn_factor", 1.0) * (1 + 0.1 * math.log(factor))
    elif scaling != "none":
        sys.exit("gguf_ref.py: rope scaling " + scaling + " is not in this reference")
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang) * mscale, np.sin(ang) * mscale

    def rope(v):   # (T, heads, d), rotate-half; llama's rows were interleaved by the writer: undo that first
        v1, v2 = v[..., :d // 2], v[..., d // 2:]
        return np.concatenate([v1 * cos[:, None] - v2 * sin[:, None], v2 * cos[:, None] + v1 * sin[:, None]], -1)

    def unperm(w, heads):
        if a != "llama":
            return w
        return w.reshape(heads, d // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        p = f"model.layers.{i}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = mm(h, p + "self_attn.q_proj.weight", unperm(W[p + "self_attn.q_proj.weight"], H)).reshape(T, H, d)
        k = mm(h, p + "self_attn.k_proj.weight", unperm(W[p + "self_attn.k_proj.weight"], KV)).reshape(T, KV, d)
        v = mm(h, p + "self_attn.v_proj.weight").reshape(T, KV, d)
        if p + "self_attn.q_norm.weight" in W:
            q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q), rope(k)
        o = np.zeros((T, H, d))
        for hh in range(H):
            kh = hh // (H // KV)
            s = q[:, hh] @ k[:, kh].T / math.sqrt(d) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            o[:, hh] = (s / s.sum(axis=1, keepdims=True)) @ v[:, kh]
        x = x + mm(o.reshape(T, H * d), p + "self_attn.o_proj.weight")
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        gt, up = mm(h, p + "mlp.gate_proj.weight"), mm(h, p + "mlp.up_proj.weight")
        x = x + mm(gt / (1 + np.exp(-gt)) * up, p + "mlp.down_proj.weight")
    x = rmsnorm(x, W["model.norm.weight"], eps)
    mm(x, "lm_head.weight" if "lm_head.weight" in W else "model.embed_tokens.weight").astype("<f8").tofile(out)


if __name__ == "__main__":
    c = sys.argv[1]
    if c == "check":
        cmd_check(sys.argv[2], sys.argv[3])
    elif c == "dequant":
        cmd_dequant(sys.argv[2], sys.argv[3])
    elif c == "forward":
        ids = [int(s) for s in sys.argv[3].split(",")]
        cmd_forward(sys.argv[2], ids, sys.argv[4], False)
        cmd_forward(sys.argv[2], ids, sys.argv[4] + ".act", True)
    elif c == "all":   # check, dequant and forward in one process (numpy's start-up once)
        cmd_check(sys.argv[2], sys.argv[3])
        cmd_dequant(sys.argv[2], sys.argv[5] + ".deq")
        ids = [int(s) for s in sys.argv[4].split(",")]
        cmd_forward(sys.argv[2], ids, sys.argv[5], False)
        cmd_forward(sys.argv[2], ids, sys.argv[5] + ".act", True)
    else:
        sys.exit(__doc__)
