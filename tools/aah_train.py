#!/usr/bin/python3
"""tools/aah_train.py — the independent PyTorch reference of the models aahd serves (Qwen3 or Llama blocks whose
attention keeps the AAH contract through an explicit mask), its trainer, and the float64 scorer the C side is checked
against.

    aah_train.py data  --out DIR [--key=value ...]          text splits, SentencePiece tokenizer, token arrays
    aah_train.py train --data DIR --out RUN [--key=value ...]   one seeded run: RUN/checkpoint-{1000,5000,10000}.pt …
    aah_train.py score CKPT ... [--regime NAME|all] (--text FILE | --ids 1,2,3 | --ids-file FILE) [--max-tokens N]
                                                              JSON lines, float64
    aah_train.py eval  CKPT ... [--text FILE] [--chunk N]     held-out loss of each checkpoint in every regime
    aah_train.py encode TOKENIZER_DIR FILE                    the ids the trainer feeds the model (BOS + text)

Model (nanoGPT's shape, Hugging Face's names and math): per layer
    x += o_proj(attn(rope(q_norm(q_proj(n(x)))), rope(k_norm(k_proj(n(x)))), v_proj(n(x))))
    x += down_proj(silu(gate_proj(n(x))) * up_proj(n(x)))
with n = RMSNorm (x / sqrt(mean(x^2) + eps) * w), q_norm/k_norm an RMSNorm over head_dim per head (Qwen3; the Llama
family has none), NEOX RoPE (rotate the halves [0, d/2) and [d/2, d)) with inv_freq[j] = theta^(-2j/d) at positions
0, 1, …, GQA (query head h reads KV head h / (n_heads / n_kv_heads)), and an output head tied to the embedding.
AAH: the query at position p of a head whose KV head's group has window W sees keys max(0, p-W+1) … p
(docs/architecture.md, "The AAH contract").
"""
import ast
import collections
import dataclasses
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

# Set before torch loads its OpenMP and OpenBLAS: measured here (2 cores shared with other jobs, 10 steps of this
# model), OpenMP's spinning threads and OpenBLAS's own second thread made a step 2-10x slower (114-850 ms against
# 50 ms); the matrices are too small for a threaded product to pay.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---- settings of `train` and `data` (plain variables; `--name=value` overrides any of them) ----
seed = 0
arch = "qwen3"                # "qwen3" (q/k RMSNorm) or "llama" (none)
vocab_size = 2048             # SentencePiece vocabulary (spm_train), byte fallback included
hidden_size = 96
intermediate_size = 192
num_hidden_layers = 4
num_attention_heads = 4
num_key_value_heads = 2
head_dim = 32
rms_norm_eps = 1e-6
rope_theta = 10000.0
block_size = 256              # training context = T of ACR = max_position_embeddings
batch_size = 2                # sequences per optimizer step: 512 tokens
max_iters = 10000
save_steps = "1000,5000,10000"
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 200
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
grad_clip = 1.0
eval_interval = 250           # a loss.tsv row every this many steps
eval_chunks = 24              # held-out chunks of block_size tokens scored per row (valid split)
threads = 2
aah = "none"                  # "none": full attention; "shallow_freeze": the static windows below
aah_windows = "32,128;32,128;64,256;64,256"   # per layer, the window of each group (group g = KV heads of slice g)
candidate_windows = "32,64,128,256"
# data
doc_root = "/usr/share/doc/python3.11/html/_sources"
doc_package = "python3.11-doc"
heldout_bytes = 240000        # each of valid and test: files are added (seeded order) while they fit
max_files = 0                 # 0: every file; N: the first N of the seeded order (the test's tiny corpus)

SETTINGS = [k for k, v in list(globals().items()) if not k.startswith("_") and isinstance(v, (int, float, str))
            and k not in ("SETTINGS",)]
FULL = "full_attention"
REGIME_NOTE = ("static windows fixed before training and frozen throughout (no controller): per layer two groups, "
               "one KV head each, a short and a long window, the shallow layers shorter")


def apply_overrides(args):
    """nanoGPT's configurator: --name=value sets the global `name`, parsed as a literal of the default's type."""
    rest = []
    for a in args:
        if not a.startswith("--") or "=" not in a:
            rest.append(a)
            continue
        k, v = a[2:].split("=", 1)
        if k not in SETTINGS:
            sys.exit(f"aah_train.py: unknown setting '{k}' (settings: {', '.join(SETTINGS)})")
        d = globals()[k]
        if isinstance(d, str):
            globals()[k] = v
            continue
        try:
            x = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            sys.exit(f"aah_train.py: setting '{k}': '{v}' is not a number")
        if isinstance(d, float) and isinstance(x, int):
            x = float(x)
        if type(x) is not type(d):
            sys.exit(f"aah_train.py: setting '{k}' must be {type(d).__name__}, not '{v}'")
        globals()[k] = x
    return rest


def settings():
    return {k: globals()[k] for k in SETTINGS}


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ---- tokenizer: Debian's spm_train / spm_encode / spm_decode, no Python binding ----

def run_tool(argv, **kw):
    try:
        return subprocess.run(argv, check=True, capture_output=True, **kw)
    except FileNotFoundError:
        sys.exit(f"aah_train.py: {argv[0]} not found (Debian package sentencepiece; deploy/deps.sh installs it)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"aah_train.py: {argv[0]} failed: {e.stderr.decode(errors='replace')[-2000:]}")


def spm_train(text_file, prefix, vocab):
    """A deterministic BPE model: one thread, every sentence (no sampling), a fixed seed. Identity normalization,
    no dummy prefix and no whitespace removal, so that a line's encoding does not depend on where the line starts
    (text is encoded line by line and joined with the newline byte: see encode_texts); byte fallback so any text
    encodes; whitespace-only pieces for the reStructuredText indentation."""
    run_tool(["spm_train", f"--input={text_file}", f"--model_prefix={prefix}", f"--vocab_size={vocab}",
              "--model_type=bpe", "--character_coverage=0.9995", "--byte_fallback=true",
              "--normalization_rule_name=identity", "--add_dummy_prefix=false", "--remove_extra_whitespaces=false",
              "--allow_whitespace_only_pieces=true", "--split_digits=true", "--num_threads=1",
              "--input_sentence_size=0", "--shuffle_input_sentence=false", "--random_seed=1",
              "--max_sentence_length=16384", "--minloglevel=2",
              "--unk_id=0", "--bos_id=1", "--eos_id=2", "--pad_id=-1"])


def tokenizer_pieces(tok_dir):
    with open(os.path.join(tok_dir, "tokenizer.vocab"), encoding="utf-8") as f:
        return [line.split("\t")[0] for line in f]


class Tokenizer:
    """The run's tokenizer.model driven through spm_encode/spm_decode. BOS (id of <s>) starts every document, as
    tokenizer_config.json's add_bos_token tells aahd. One difference is left: aahd reads text that spells a control
    piece (<s>, </s>) as that token, spm_encode spells it out; no file of the corpus holds one."""

    def __init__(self, tok_dir):
        self.model = os.path.join(tok_dir, "tokenizer.model")
        if not os.path.exists(self.model):
            sys.exit(f"aah_train.py: {self.model}: no such file")
        with open(os.path.join(tok_dir, "tokenizer_config.json")) as f:
            self.add_bos = json.load(f).get("add_bos_token", False)
        # ids from the vocabulary spm_train wrote beside the model. The newline is no piece (spm_train reads lines):
        # it is the byte piece <0x0A>, which joins the lines' encodings (encode_texts).
        pieces = tokenizer_pieces(tok_dir)
        for need in ("<s>", "</s>", "<0x0A>"):
            if need not in pieces:
                sys.exit(f"aah_train.py: {tok_dir}/tokenizer.vocab has no piece {need}")
        self.bos, self.eos, self.newline = pieces.index("<s>"), pieces.index("</s>"), pieces.index("<0x0A>")

    def encode_lines(self, lines):
        """spm_encode over lines that hold no newline: one list of ids per line."""
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "in.txt")
            with open(src, "w", encoding="utf-8", newline="") as f:
                f.write("".join(line + "\n" for line in lines))
            out = run_tool(["spm_encode", f"--model={self.model}", "--output_format=id", f"--input={src}"]).stdout
        rows = out.decode().split("\n")
        if rows and rows[-1] == "":
            rows.pop()
        if len(rows) != len(lines):
            sys.exit(f"aah_train.py: spm_encode gave {len(rows)} lines for {len(lines)}")
        return [[int(x) for x in r.split()] for r in rows]

    def encode_texts(self, texts, bos=None):
        """Each text: [BOS] + its lines' ids joined by the newline's id (one spm_encode call for all of them)."""
        bos = self.add_bos if bos is None else bos
        split = [t.split("\n") for t in texts]
        flat = self.encode_lines([line for parts in split for line in parts])
        out, i = [], 0
        for parts in split:
            ids = [self.bos] if bos else []
            for j in range(len(parts)):
                if j:
                    ids.append(self.newline)
                ids.extend(flat[i])
                i += 1
            out.append(ids)
        return out

    def decode(self, ids):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "ids.txt")
            with open(src, "w") as f:
                f.write(" ".join(str(i) for i in ids if i not in (self.bos, self.eos)) + "\n")
            out = run_tool(["spm_decode", f"--model={self.model}", "--input_format=id", f"--input={src}"]).stdout
        return out.decode("utf-8", errors="replace").removesuffix("\n")


def write_tokenizer_files(tok_dir, prefix):
    for ext in ("model", "vocab"):
        os.replace(f"{prefix}.{ext}", os.path.join(tok_dir, f"tokenizer.{ext}"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer",
                   "model_max_length": block_size}, f, indent=2)
        f.write("\n")


# ---- data: the reStructuredText sources of python3.11-doc, split by file ----

def doc_files():
    if not os.path.isdir(doc_root):
        sys.exit(f"aah_train.py: {doc_root}: not there (install the Debian package {doc_package})")
    files = []
    for d, _, names in os.walk(doc_root):
        files += [os.path.relpath(os.path.join(d, n), doc_root) for n in names if n.endswith(".txt")]
    files.sort()
    if not files:
        sys.exit(f"aah_train.py: {doc_root}: no .txt files")
    return files


def split_files(files):
    """Seeded order; test then valid take files while they fit in heldout_bytes; the rest is train."""
    order = files[:]
    random.Random(seed).shuffle(order)
    if max_files:
        order = order[:max_files]
    size = {f: os.path.getsize(os.path.join(doc_root, f)) for f in order}
    split = {"test": [], "valid": [], "train": []}
    used = set()
    for name in ("test", "valid"):
        total = 0
        for f in order:
            if f not in used and total + size[f] <= heldout_bytes:
                split[name].append(f)
                used.add(f)
                total += size[f]
    split["train"] = [f for f in order if f not in used]
    for k in split:
        split[k].sort()
    return split


def read_doc(rel):
    with open(os.path.join(doc_root, rel), encoding="utf-8", newline="") as f:
        return f.read()


def package_version():
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", doc_package], capture_output=True,
                              text=True).stdout or "unknown"
    except FileNotFoundError:
        return "unknown"


def cmd_data(args):
    out = option(args, "--out") or sys.exit("aah_train.py data: --out DIR is required")
    no_more(args, "data")
    os.makedirs(out, exist_ok=True)
    split = split_files(doc_files())
    texts = {k: [read_doc(f) for f in v] for k, v in split.items()}
    listing = "".join(f"{k}\t{f}\t{hashlib.sha256(t.encode()).hexdigest()}\n"
                      for k in ("train", "valid", "test") for f, t in zip(split[k], texts[k]))
    for k in ("train", "valid", "test"):
        with open(os.path.join(out, f"{k}.txt"), "w", encoding="utf-8", newline="") as f:
            f.write("".join(texts[k]))
    t0 = time.time()
    prefix = os.path.join(out, "spm")
    spm_train(os.path.join(out, "train.txt"), prefix, vocab_size)
    write_tokenizer_files(out, prefix)
    tok = Tokenizer(out)
    tokens = {}
    for k in ("train", "valid", "test"):
        if k == "train":   # one document per file, each starting with BOS
            ids = [i for doc in tok.encode_texts(texts[k]) for i in doc]
        else:              # the committed file as one text, exactly what a user would send
            ids = tok.encode_texts(["".join(texts[k])])[0]
        tokens[k] = len(ids)
        np.save(os.path.join(out, f"{k}.npy"), np.array(ids, dtype=np.uint16))
    meta = {"package": doc_package, "package_version": package_version(), "root": doc_root,
            "license": "PSF License Agreement (the Python documentation; code examples also Zero-Clause BSD), "
                       "see license.rst.txt in the same folder and /usr/share/doc/python3.11-doc/copyright",
            "split_seed": seed, "heldout_bytes": heldout_bytes, "max_files": max_files,
            "files": {k: len(v) for k, v in split.items()},
            "bytes": {k: sum(len(t.encode()) for t in v) for k, v in texts.items()},
            "tokens": tokens, "heldout_files": {"valid": split["valid"], "test": split["test"]},
            "file_list_sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "tokenizer": {"vocab_size": vocab_size, "sha256": sha256_file(os.path.join(out, "tokenizer.model")),
                          "seconds": round(time.time() - t0, 1)}}
    with open(os.path.join(out, "files.tsv"), "w") as f:
        f.write(listing)
    with open(os.path.join(out, "data.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(json.dumps({k: meta[k] for k in ("files", "bytes", "tokens", "file_list_sha256")}))


# ---- the model ----

@dataclasses.dataclass
class ModelConfig:
    arch: str = "qwen3"
    vocab_size: int = 2048
    hidden_size: int = 96
    intermediate_size: int = 192
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 256
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    bos_token_id: int = 1
    eos_token_id: int = 2

    def hf(self):
        """config.json (Hugging Face's keys; what aahd's models/model_config.c reads)."""
        c = {k: v for k, v in dataclasses.asdict(self).items() if k != "arch"}
        name = {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[self.arch]
        return {"architectures": [name], "model_type": self.arch, **c, "hidden_act": "silu",
                "attention_bias": False, "torch_dtype": "float32"}

    @staticmethod
    def from_hf(c):
        if c.get("model_type") not in ("qwen3", "llama"):
            sys.exit(f"aah_train.py: model_type {c.get('model_type')!r} is not qwen3 or llama")
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        return ModelConfig(arch=c["model_type"], **{k: v for k, v in c.items() if k in fields and k != "arch"})


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):   # x / sqrt(mean(x^2) + eps) * w over the last axis
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, T, dtype):
    """cos, sin (T, head_dim/2). inv_freq is rounded to float32 as aahd keeps it (model_config_rope_freqs); the angle
    pos * inv_freq and its cosine are taken in float64, as aahd's CPU backend does, then cast."""
    j = torch.arange(cfg.head_dim // 2, dtype=torch.float64)
    inv_freq = (cfg.rope_theta ** (-2.0 * j / cfg.head_dim)).float().double()
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, cos, sin):
    """NEOX rotation of x (B, T, heads, head_dim): pairs (j, j + d/2) turn by pos * inv_freq[j]."""
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def aah_mask(windows, T, group):
    """(n_heads, T, T) bool: query p of head h sees key t iff t <= p and p - t < W[h / group] (the AAH contract of
    docs/architecture.md: keys max(0, p-W+1) … p). windows: one int per KV head."""
    p = torch.arange(T)[:, None]
    t = torch.arange(T)[None, :]
    w = torch.tensor(windows)[:, None, None]
    return ((t <= p) & (p - t < w)).repeat_interleave(group, dim=0)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=False)
        if cfg.arch == "qwen3":
            self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, blocked):
        """blocked (n_kv, group * T, T): aah_mask's complement, viewed per KV head."""
        B, T, _ = x.shape
        c, hd = self.cfg, self.cfg.head_dim
        q = self.q_proj(x).view(B, T, c.num_attention_heads, hd)
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, hd)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, hd)
        if c.arch == "qwen3":   # per head, before the rotation
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        # GQA: query head h = kv * group + g reads KV head kv = h / group, so the group's query heads stack into
        # one (group * T, hd) block per KV head: (B, n_kv, group * T, hd) against that head's keys (B, n_kv, T, hd).
        q = q.permute(0, 2, 1, 3).reshape(B, c.num_key_value_heads, self.group * T, hd)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))            # (B, n_kv, group * T, T)
        att = att.masked_fill(blocked, float("-inf")).softmax(dim=-1)
        y = (att @ v).view(B, c.num_attention_heads, T, hd).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Model(nn.Module):
    """Tensor names are Hugging Face's (model.layers.0.self_attn.q_proj.weight, …); lm_head shares the embedding."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self._tables = {}
        for name, p in self.named_parameters():
            if p.dim() == 2:   # GPT-2's init: N(0, 0.02), residual outputs scaled by 1/sqrt(2 layers)
                std = 0.02 / math.sqrt(2 * cfg.num_hidden_layers) if name.endswith(("o_proj.weight",
                                                                                      "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def tables(self, T, windows):
        """RoPE tables and per layer the keys each query may not see, cached by (T, windows, dtype). windows: per layer
        a list of one window per KV head, or None (full attention)."""
        dtype = self.model.embed_tokens.weight.dtype
        key = (T, None if windows is None else tuple(map(tuple, windows)), dtype)
        if key not in self._tables:
            cos, sin = rope_tables(self.cfg, T, dtype)
            group = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
            full = [T] * self.cfg.num_key_value_heads
            masks = [~aah_mask(full if windows is None else windows[l], T, group).view(
                     self.cfg.num_key_value_heads, group * T, T) for l in range(self.cfg.num_hidden_layers)]
            self._tables[key] = (cos, sin, masks)
        return self._tables[key]

    def forward(self, idx, windows=None):
        """idx (B, T) token ids at positions 0 … T-1 → logits (B, T, vocab)."""
        cos, sin, masks = self.tables(idx.shape[1], windows)
        x = self.model.embed_tokens(idx)
        for layer, mask in zip(self.model.layers, masks):
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.model.norm(x))


def n_params(model):
    return sum(p.numel() for p in model.parameters())   # a tied weight counts once


# ---- AAH regimes (the checkpoint's "aah" dict; aah.json's regime objects) ----

def static_regime(cfg, per_layer):
    """per_layer: for each layer the window of each group; group g holds the g-th equal slice of the KV heads."""
    layers = []
    for l, ws in enumerate(per_layer):
        n = len(ws)
        if cfg.num_key_value_heads % n:
            sys.exit(f"aah_train.py: layer {l}: {n} groups do not divide {cfg.num_key_value_heads} KV heads")
        k = cfg.num_key_value_heads // n
        layers.append({"groups": [{"kv_heads": list(range(g * k, (g + 1) * k)), "window": w, "capacity": w}
                                  for g, w in enumerate(ws)]})
    return {"policy": {"kind": "static"}, "grouping": "fixed", "hierarchy": [len(per_layer[0])],
            "scorer": "none", "layers": layers}


def regime_windows(cfg, aah_state, name):
    """Per layer one window per KV head for regime `name`; None for full attention."""
    if name == FULL:
        return None
    regimes = (aah_state or {}).get("regimes", {})
    if name not in regimes:
        sys.exit(f"aah_train.py: no regime '{name}' (have: {', '.join([FULL] + list(regimes))})")
    out = []
    for layer in regimes[name]["layers"]:
        w = [0] * cfg.num_key_value_heads
        for g in layer["groups"]:
            for h in g["kv_heads"]:
                w[h] = g["window"]
        out.append(w)
    return out


def branch_usage(cfg, aah_state, name, n_tokens):
    """f_W as docs/architecture.md counts it: each (layer, group, query token) selecting window W adds the group's
    query-head count. With a static policy every token selects its group's window; counted over the n_tokens scored."""
    usage = collections.Counter()
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    for layer in aah_state["regimes"][name]["layers"]:
        for g in layer["groups"]:
            usage[g["window"]] += n_tokens * len(g["kv_heads"]) * group
    total = sum(usage.values())
    return {str(w): usage[w] / total for w in aah_state["candidate_windows"]}


def acr(usage, T):
    return sum(f * int(w) for w, f in usage.items()) / T


# ---- training ----

def lr_at(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    r = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * min(1.0, r))) * (learning_rate - min_lr)


@torch.no_grad()
def heldout_loss(model, tokens, windows, T, chunks=0):
    """Mean next-token loss over consecutive chunks of T+1 tokens (overlapping by one: every token but the first of
    the text is predicted once), each chunk at positions 0 … T-1; chunks=0: all of them."""
    n = (len(tokens) - 1) // T
    if chunks:
        n = min(n, chunks)
    total, count = 0.0, 0
    for i in range(n):
        x = torch.from_numpy(tokens[i * T:(i + 1) * T + 1].astype(np.int64))[None]
        logits = model(x[:, :-1], windows)
        total += F.cross_entropy(logits[0], x[0, 1:], reduction="sum").item()
        count += T
    rest = len(tokens) - 1 - n * T
    if not chunks and rest > 0:   # the tail, shorter than T
        x = torch.from_numpy(tokens[n * T:].astype(np.int64))[None]
        total += F.cross_entropy(model(x[:, :-1], windows)[0], x[0, 1:], reduction="sum").item()
        count += rest
    return total / count


def blas_in_use():
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "blas" in line.lower()})
        return [l for l in libs if l.startswith("/")]
    except OSError:
        return []


def loss_svg(rows, title):
    """loss.tsv's curves as a small SVG (matplotlib is not needed): train and held-out loss against step."""
    W, H, L, R, Tm, B = 640, 360, 60, 20, 30, 40
    steps = [r[0] for r in rows]
    vals = [v for r in rows for v in r[1:] if v == v]
    lo, hi = math.floor(min(vals) * 2) / 2, math.ceil(max(vals) * 2) / 2
    sx = lambda s: L + (W - L - R) * s / max(1, max(steps))
    sy = lambda v: Tm + (H - Tm - B) * (hi - v) / max(1e-9, hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="11"><rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18" font-size="13">{title}</text>']
    for i in range(int((hi - lo) * 2) + 1):
        v = lo + i * 0.5
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{L - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
    for s in range(0, max(steps) + 1, max(1, max(steps) // 5)):
        out.append(f'<text x="{sx(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(W + L) / 2}" y="{H - 6}" text-anchor="middle">optimizer step</text>')
    for col, color, name in ((1, "#1f77b4", "train loss"), (2, "#d62728", "held-out loss (valid)")):
        pts = " ".join(f"{sx(r[0]):.1f},{sy(r[col]):.1f}" for r in rows if r[col] == r[col])
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
        y = Tm + 14 * col
        out.append(f'<line x1="{W - R - 150}" x2="{W - R - 130}" y1="{y}" y2="{y}" stroke="{color}" '
                   f'stroke-width="2"/><text x="{W - R - 125}" y="{y + 4}">{name}</text>')
    out.append("</svg>\n")
    return "\n".join(out)


def save_checkpoint(path, model, opt, step, cfg, aah_state, train_info):
    # torch.save's zip archive names its folder after the file: checkpoint-STEP/data.pkl, checkpoint-STEP/data/0 …
    torch.save({"model": model.state_dict(), "step": step, "seed": seed, "config": cfg.hf(),
                "optimizer": opt.state_dict(), "aah": aah_state, "train": train_info}, path)


def cmd_train(args):
    data = option(args, "--data") or sys.exit("aah_train.py train: --data DIR (from `aah_train.py data`) is required")
    out = option(args, "--out") or sys.exit("aah_train.py train: --out RUN is required")
    no_more(args, "train")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    train_tok = np.load(os.path.join(data, "train.npy"))
    valid_tok = np.load(os.path.join(data, "valid.npy"))
    with open(os.path.join(data, "data.json")) as f:
        data_meta = json.load(f)
    if data_meta["tokenizer"]["vocab_size"] != vocab_size:
        sys.exit(f"aah_train.py: {data} has a {data_meta['tokenizer']['vocab_size']}-piece tokenizer, "
                 f"vocab_size is {vocab_size}")
    cfg = ModelConfig(arch=arch, vocab_size=vocab_size, hidden_size=hidden_size,
                      intermediate_size=intermediate_size, num_hidden_layers=num_hidden_layers,
                      num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                      head_dim=head_dim, max_position_embeddings=block_size, rms_norm_eps=rms_norm_eps,
                      rope_theta=rope_theta)
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        sys.exit("aah_train.py: num_attention_heads must be a multiple of num_key_value_heads")
    model = Model(cfg)
    cands = ints(candidate_windows)
    if aah == "none":
        aah_state, windows = None, None
    elif aah == "shallow_freeze":
        per_layer = [ints(s) for s in aah_windows.split(";")]
        if len(per_layer) != num_hidden_layers or any(w not in cands for ws in per_layer for w in ws):
            sys.exit(f"aah_train.py: aah_windows needs {num_hidden_layers} layers of windows from {cands}")
        aah_state = {"context_length": block_size, "candidate_windows": cands,
                     "regimes": {aah: static_regime(cfg, per_layer)}, "default_regime": aah}
        windows = regime_windows(cfg, aah_state, aah)
    else:
        sys.exit(f"aah_train.py: aah must be none or shallow_freeze, not '{aah}'")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=learning_rate, betas=(beta1, beta2))
    os.makedirs(out, exist_ok=True)
    for name in ("tokenizer.model", "tokenizer.vocab", "tokenizer_config.json"):
        with open(os.path.join(data, name), "rb") as src, open(os.path.join(out, name), "wb") as dst:
            dst.write(src.read())
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg.hf(), f, indent=2)
        f.write("\n")
    saves = set(ints(save_steps))
    rng = np.random.default_rng(seed)
    T = block_size
    rows, acc, acc_n, last = [], 0.0, 0, float("nan")
    rows.append((0, float("nan"), heldout_loss(model, valid_tok, windows, T, eval_chunks)))
    load0, t0, train_s = os.getloadavg(), time.time(), 0.0
    print(f"train: {n_params(model)} parameters, {len(train_tok)} training tokens, aah={aah}, blas={blas_in_use()}",
          flush=True)
    for it in range(max_iters):
        ts = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        ix = rng.integers(0, len(train_tok) - T - 1, size=batch_size)
        xy = torch.from_numpy(np.stack([train_tok[i:i + T + 1] for i in ix]).astype(np.int64))
        logits = model(xy[:, :-1], windows)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        train_s += time.time() - ts
        last = loss.item()
        acc, acc_n, step = acc + last, acc_n + 1, it + 1
        if step % eval_interval == 0 or step == max_iters:
            rows.append((step, acc / acc_n, heldout_loss(model, valid_tok, windows, T, eval_chunks)))
            acc, acc_n = 0.0, 0
            print(f"step {step}: train {rows[-1][1]:.4f} held-out {rows[-1][2]:.4f} "
                  f"({(time.time() - t0) / step * 1000:.0f} ms/step)", flush=True)
        if step in saves:
            info = {"loss": last, "tokens_seen": step * batch_size * T, "wall_seconds": round(time.time() - t0, 1),
                    "heldout_loss": rows[-1][2] if rows[-1][0] == step else None}
            if aah_state is not None:   # f_W as selected over the held-out tokens just scored
                aah_state["branch_usage"] = branch_usage(cfg, aah_state, aah, min(eval_chunks, len(valid_tok) // T)
                                                         * T)
            save_checkpoint(os.path.join(out, f"checkpoint-{step}.pt"), model, opt, step, cfg, aah_state, info)
    wall = time.time() - t0
    with open(os.path.join(out, "loss.tsv"), "w") as f:
        f.write("step\ttrain_loss\theldout_loss\n")
        for s, a, b in rows:
            f.write(f"{s}\t{'' if a != a else f'{a:.4f}'}\t{b:.4f}\n")
    with open(os.path.join(out, "loss.svg"), "w") as f:
        f.write(loss_svg(rows, f"{os.path.basename(os.path.normpath(out))}: aah={aah}, {n_params(model)} "
                               f"parameters, {max_iters} steps"))
    meta = {"settings": settings(), "config": cfg.hf(), "parameters": n_params(model),
            "wall_seconds": round(wall, 1), "step_seconds": round(train_s, 1),
            "loadavg_start": load0, "loadavg_end": os.getloadavg(),
            "final_train_loss": rows[-1][1], "final_heldout_loss": rows[-1][2], "tokens_seen": max_iters * batch_size * T,
            "aah": aah_state, "regime_note": REGIME_NOTE if aah_state else None, "acr": acr(aah_state["branch_usage"], T) if aah_state else 1.0,
            "data": data_meta, "torch": torch.__version__, "numpy": np.__version__, "threads": threads,
            "blas": blas_in_use(), "python": sys.version.split()[0],
            "command": "tools/aah_train.py " + " ".join(sys.argv[1:])}
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"train: done in {wall:.0f} s; final train {rows[-1][1]:.4f}, held-out {rows[-1][2]:.4f}", flush=True)


# ---- score and eval: float64 references ----

def option(args, name, default=None):
    if name in args:
        i = args.index(name)
        if i + 1 >= len(args):
            sys.exit(f"aah_train.py: {name} needs a value")
        v = args[i + 1]
        del args[i:i + 2]
        return v
    return default


def no_more(args, mode):
    if args:
        sys.exit(f"aah_train.py {mode}: unexpected arguments {args}")


def load_checkpoint(path, dtype=torch.float64):
    """The model of a checkpoint-STEP.pt in float64 (or dtype), its dict, and its run's tokenizer folder."""
    if not os.path.exists(path):
        sys.exit(f"aah_train.py: {path}: no such file")
    ck = torch.load(path, map_location="cpu")
    if not isinstance(ck, dict) or "model" not in ck or "config" not in ck:
        sys.exit(f"aah_train.py: {path}: not a checkpoint of this trainer (a dict with 'model' and 'config')")
    cfg = ModelConfig.from_hf(ck["config"])
    model = Model(cfg)
    model.load_state_dict(ck["model"])
    model.to(dtype).eval()
    return model, ck, os.path.dirname(os.path.abspath(path))


def score_one(model, ids, windows, max_tokens):
    """The prompt's log-probabilities (the first None) and a greedy continuation: its ids, log-probabilities and
    margins (top-1 minus top-2 log-probability: how firmly each step was decided), in the model's dtype."""
    with torch.no_grad():
        lp = model(torch.tensor([ids]), windows)[0].log_softmax(-1)
        prompt_lp = [None] + [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]
        greedy, greedy_lp, margins, seq = [], [], [], list(ids)
        for _ in range(max_tokens):   # the whole sequence again each step: the reference, not the fast path
            last = model(torch.tensor([seq]), windows)[0, -1].log_softmax(-1)
            top = last.topk(2)
            t = int(top.indices[0])
            greedy.append(t)
            greedy_lp.append(top.values[0].item())
            margins.append((top.values[0] - top.values[1]).item())
            seq.append(t)
    return prompt_lp, greedy, greedy_lp, margins


def cmd_score(args):
    regime = option(args, "--regime", FULL)
    text = option(args, "--text")
    ids_arg = option(args, "--ids")
    ids_file = option(args, "--ids-file")
    max_tokens = int(option(args, "--max-tokens", "16"))
    if not args or any(a.startswith("--") for a in args) or \
            sum(x is not None for x in (text, ids_arg, ids_file)) != 1:
        sys.exit("usage: aah_train.py score CKPT ... [--regime NAME|all] (--text FILE | --ids 1,2,3 | --ids-file FILE) "
                 "[--max-tokens N]")
    torch.set_num_threads(threads)
    prompts = None   # lists of ids; from --text, encoded per checkpoint by its run's tokenizer
    if ids_arg is not None or ids_file is not None:
        if ids_file is not None:
            if not os.path.exists(ids_file):
                sys.exit(f"aah_train.py: {ids_file}: no such file")
            with open(ids_file, encoding="utf-8") as f:
                lines = [(n, line.strip()) for n, line in enumerate(f, 1) if line.strip()]
        else:
            lines = [(0, ids_arg)]
        prompts = []
        for n, line in lines:
            try:
                prompts.append(ints(line))
            except ValueError:
                where = f"{ids_file} line {n}" if n else "--ids"
                sys.exit(f"aah_train.py: {where}: '{line[:40]}' is not a comma-separated list of integers")
        if not prompts:
            sys.exit(f"aah_train.py: {ids_file}: no id lists")
    for path in args:
        model, ck, run = load_checkpoint(path)
        cfg = model.cfg
        names = [FULL] + list((ck.get("aah") or {}).get("regimes", {})) if regime == "all" else [regime]
        tok = Tokenizer(run)
        ps = prompts
        if ps is None:
            with open(text, encoding="utf-8", newline="") as f:
                ps = [tok.encode_texts([f.read()])[0]]
        for ids in ps:
            if not ids or any(i < 0 or i >= cfg.vocab_size for i in ids):
                sys.exit(f"aah_train.py: the ids must be a non-empty list in [0, {cfg.vocab_size})")
            if len(ids) + max_tokens > cfg.max_position_embeddings:
                sys.exit(f"aah_train.py: {len(ids)} prompt tokens + {max_tokens} exceed the context of "
                         f"{cfg.max_position_embeddings}")
        for name in names:   # one JSON object per line: checkpoint by checkpoint, regime by regime, prompt by prompt
            windows = regime_windows(cfg, ck.get("aah"), name)
            a = acr(branch_usage(cfg, ck["aah"], name, 1), cfg.max_position_embeddings) if windows else 1.0
            for ids in ps:
                prompt_lp, greedy, greedy_lp, margins = score_one(model, ids, windows, max_tokens)
                print(json.dumps({"checkpoint": path, "step": ck.get("step"), "regime": name, "dtype": "float64",
                                  "windows": windows, "acr": a, "tokens": ids, "token_logprobs": prompt_lp, "greedy_tokens": greedy,
                                  "greedy_logprobs": greedy_lp, "greedy_margins": margins,
                                  "greedy_text": tok.decode(greedy)}), flush=True)


def cmd_eval(args):
    text = option(args, "--text", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runs", "text",
                                               "test.txt"))
    chunk = option(args, "--chunk")
    if not args or any(a.startswith("--") for a in args):
        sys.exit("usage: aah_train.py eval CKPT ... [--text FILE] [--chunk N]")
    torch.set_num_threads(threads)
    loaded = [load_checkpoint(p) for p in args]
    if chunk is not None:   # N predictions per chunk of N+1 tokens; aahd's prompt of ctx tokens scores ctx-1 of them
        if not chunk.isdigit() or not 1 <= int(chunk) <= min(m.cfg.max_position_embeddings for m, _, _ in loaded):
            sys.exit(f"aah_train.py: --chunk '{chunk}' is not a number of tokens from 1 to the context")
        chunk = int(chunk)
    regimes = {}
    for _, ck, _ in loaded:   # every regime of any run given, so the base run is scored in the AAH windows too
        if ck.get("aah"):
            for name in ck["aah"]["regimes"]:
                regimes.setdefault(name, ck["aah"])
    with open(text, encoding="utf-8", newline="") as f:
        body = f.read()
    results = []
    for path, (model, ck, run) in zip(args, loaded):
        tokens = np.array(Tokenizer(run).encode_texts([body])[0], dtype=np.int64)
        T = model.cfg.max_position_embeddings
        for name in [FULL] + list(regimes):
            windows = regime_windows(model.cfg, regimes.get(name), name)
            loss = heldout_loss(model, tokens, windows, chunk or T)
            usage = branch_usage(model.cfg, regimes[name], name, 1) if name != FULL else None
            results.append({"checkpoint": path, "step": ck.get("step"), "regime": name, "chunk": chunk or T,
                            "loss": loss, "ppl": round(math.exp(loss), 2), "acr": round(acr(usage, T), 4) if usage else 1.0,
                            "tokens": int(len(tokens) - 1)})
            print(f"{path}\t{name}\tloss {loss:.4f}\tppl {math.exp(loss):.2f}\tACR {results[-1]['acr']:.4f}\t"
                  f"{len(tokens) - 1} tokens", flush=True)
    print(json.dumps(results))


def cmd_encode(args):
    if len(args) != 2:
        sys.exit("usage: aah_train.py encode TOKENIZER_DIR FILE")
    with open(args[1], encoding="utf-8", newline="") as f:
        print(",".join(map(str, Tokenizer(args[0]).encode_texts([f.read()])[0])))


def main(argv):
    if not argv or argv[0] not in ("data", "train", "score", "eval", "encode"):
        sys.exit(__doc__)
    mode, args = argv[0], argv[1:]
    if mode in ("data", "train"):
        args = apply_overrides(args)
    {"data": cmd_data, "train": cmd_train, "score": cmd_score, "eval": cmd_eval, "encode": cmd_encode}[mode](args)


if __name__ == "__main__":
    main(sys.argv[1:])
