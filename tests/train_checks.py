#!/usr/bin/python3
"""tests/train_checks.py — checks of tools/aah_train.py, run by tests/test_train.sh: the AAH mask (a query sees
exactly the keys of its window), the attention against a naive per-head loop, and what a short run wrote.

    train_checks.py mask
    train_checks.py run RUN STEPS          RUN written by `aah_train.py train` with checkpoints at STEPS (comma list)
"""
import json
import math
import os
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import aah_train as A  # noqa: E402

import torch  # noqa: E402

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def naive_attention(attn, x, windows):
    """The contract written out: head h, query p, keys t in [max(0, p-W+1), p] with W the window of KV head
    h // group; softmax over those keys only. Returns (T, n_heads * head_dim) before o_proj."""
    c = attn.cfg
    T, hd, group = x.shape[1], c.head_dim, c.num_attention_heads // c.num_key_value_heads
    q = attn.q_proj(x).view(1, T, c.num_attention_heads, hd)
    k = attn.k_proj(x).view(1, T, c.num_key_value_heads, hd)
    v = attn.v_proj(x).view(1, T, c.num_key_value_heads, hd)
    if c.arch == "qwen3":
        q, k = attn.q_norm(q), attn.k_norm(k)
    cos, sin = A.rope_tables(c, T, x.dtype)
    q, k = A.rope(q, cos, sin)[0], A.rope(k, cos, sin)[0]
    out = torch.zeros(T, c.num_attention_heads, hd, dtype=x.dtype)
    for h in range(c.num_attention_heads):
        kv = h // group
        for p in range(T):
            lo = max(0, p - windows[kv] + 1)
            s = torch.stack([q[p, h] @ k[t, kv] for t in range(lo, p + 1)]) / math.sqrt(hd)
            out[p, h] = s.softmax(0) @ v[0, lo:p + 1, kv]
    return out.reshape(T, -1)


def cmd_mask():
    torch.manual_seed(1)
    for arch in ("qwen3", "llama"):
        cfg = A.ModelConfig(arch=arch, vocab_size=64, hidden_size=24, intermediate_size=32, num_hidden_layers=1,
                            num_attention_heads=6, num_key_value_heads=3, head_dim=8, max_position_embeddings=20)
        model = A.Model(cfg).double()
        attn = model.model.layers[0].self_attn
        for p_ in attn.parameters():   # norms away from 1 so that q/k norm placement matters
            if p_.dim() == 1:
                p_.data.uniform_(0.5, 1.5)
        attn.o_proj = torch.nn.Identity()   # head outputs side by side: (T, n_heads * head_dim)
        T, windows = 20, [3, 8, 20]
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        blocked = model.tables(T, [windows])[2][0]
        cos, sin, _ = model.tables(T, [windows])
        x = torch.randn(1, T, cfg.hidden_size, dtype=torch.float64)
        with torch.no_grad():
            y = attn(x, cos, sin, blocked)[0]
            ref = naive_attention(attn, x, windows)
            check(torch.allclose(y, ref, atol=1e-12, rtol=0),
                  f"{arch}: masked attention equals the per-head loop (max diff {float((y - ref).abs().max()):.1e})")
            # perturb the token at t: the output of query p in head h moves iff p - W < t <= p
            wrong = []
            for t in range(T):
                x2 = x.clone()
                x2[0, t] += torch.randn(cfg.hidden_size, dtype=torch.float64)
                d = (attn(x2, cos, sin, blocked)[0] - y).abs().view(T, cfg.num_attention_heads, -1).amax(-1)
                for p in range(T):
                    for h in range(cfg.num_attention_heads):
                        w = windows[h // group]
                        inside = p - w < t <= p
                        if inside != bool(d[p, h] > 1e-12):
                            wrong.append((t, p, h))
            check(not wrong, f"{arch}: a key moves exactly the queries whose window holds it ({len(wrong)} wrong, "
                             f"first {wrong[:3]})")
            # full attention equals a window of T, and the mask's own spelling of the contract
            full = model.tables(T, None)[2][0]
            check(torch.equal(full, model.tables(T, [[T] * 3])[2][0]), f"{arch}: full attention is every window T")
            m = A.aah_mask(windows, T, group)
            check(bool(m[0, 5, 3]) and not m[0, 5, 2] and not m[0, 5, 6] and bool(m[5, 19, 0]),
                  f"{arch}: head 0 (window 3) at p=5 sees 3..5; head 5 (window 20) at p=19 sees 0")


def cmd_run(run, steps):
    cfg = json.load(open(os.path.join(run, "config.json")))
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
              "tie_word_embeddings", "bos_token_id", "eos_token_id"):
        check(k in cfg, f"config.json has {k}")
    check(cfg.get("model_type") == "qwen3" and cfg.get("architectures") == ["Qwen3ForCausalLM"]
          and cfg.get("torch_dtype") == "float32", "config.json: qwen3, Qwen3ForCausalLM, float32")
    tc = json.load(open(os.path.join(run, "tokenizer_config.json")))
    check(tc.get("add_bos_token") is True and tc.get("bos_token") == "<s>" and tc.get("eos_token") == "</s>",
          "tokenizer_config.json: add_bos_token true, <s>, </s>")
    L = cfg["num_hidden_layers"]
    names = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    for i in range(L):
        p = f"model.layers.{i}."
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        names |= {p + f"self_attn.{n}_proj.weight" for n in "qkvo"} | {p + f"self_attn.{n}_norm.weight" for n in "qk"}
        names |= {p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
    for s in steps:
        path = os.path.join(run, f"checkpoint-{s}.pt")
        check(os.path.exists(path), f"{path} exists")
        with zipfile.ZipFile(path) as z:
            entries = z.namelist()
        check(f"checkpoint-{s}/data.pkl" in entries and f"checkpoint-{s}/version" in entries
              and f"checkpoint-{s}/data/0" in entries, f"checkpoint-{s}.pt: zip with checkpoint-{s}/data.pkl, version, "
                                                      f"data/0")
        ck = torch.load(path, map_location="cpu")
        check(set(ck) >= {"model", "step", "seed", "config", "optimizer", "aah", "train"}, f"step {s}: the dict's keys")
        sd = ck["model"]
        check(type(sd).__name__ == "OrderedDict" and set(sd) == names, f"step {s}: state dict under Hugging Face names")
        check(all(t.dtype == torch.float32 for t in sd.values()), f"step {s}: float32 tensors")
        emb, head = sd["model.embed_tokens.weight"], sd["lm_head.weight"]
        check(emb.data_ptr() == head.data_ptr(), f"step {s}: lm_head.weight shares the embedding's storage")
        check(sd[f"model.layers.0.self_attn.q_proj.weight"].shape == (cfg["num_attention_heads"] * cfg["head_dim"],
                                                                      cfg["hidden_size"]), f"step {s}: q_proj shape")
        check(ck["step"] == s and ck["config"] == cfg, f"step {s}: step and config match")
        check(len(ck["optimizer"]["state"]) == len(list(A.Model(A.ModelConfig.from_hf(cfg)).parameters())),
              f"step {s}: optimizer state for every parameter")
        a = ck["aah"]
        check(a is not None and a["context_length"] == cfg["max_position_embeddings"]
              and a["candidate_windows"] == sorted(a["candidate_windows"]) and a["default_regime"] in a["regimes"],
              f"step {s}: aah state: context length, ascending windows, default regime")
        reg = a["regimes"][a["default_regime"]]
        check(len(reg["layers"]) == L and reg["policy"] == {"kind": "static"}
              and all(sorted(h for g in layer["groups"] for h in g["kv_heads"]) == list(range(cfg["num_key_value_heads"]))
                      and all(g["window"] in a["candidate_windows"] and g["capacity"] >= g["window"]
                              for g in layer["groups"]) for layer in reg["layers"]),
              f"step {s}: every layer's groups cover each KV head once, windows are candidates")
        check(abs(sum(a["branch_usage"].values()) - 1) < 1e-9, f"step {s}: branch usage sums to 1")
    rows = [line.split("\t") for line in open(os.path.join(run, "loss.tsv")).read().splitlines()[1:]]
    first, last = float(rows[0][2]), float(rows[-1][2])
    check(last < first - 0.3, f"held-out loss falls: {first:.3f} -> {last:.3f}")
    train = [float(r[1]) for r in rows if r[1]]
    check(train[-1] < train[0], f"train loss falls: {train[0]:.3f} -> {train[-1]:.3f}")
    meta = json.load(open(os.path.join(run, "train.json")))
    check(meta["parameters"] > 0 and meta["wall_seconds"] > 0 and meta["data"]["file_list_sha256"],
          "train.json: parameters, wall time, file list hash")
    check(open(os.path.join(run, "loss.svg")).read().startswith("<svg"), "loss.svg is an SVG")


if __name__ == "__main__":
    if sys.argv[1:2] == ["mask"]:
        cmd_mask()
    elif sys.argv[1:2] == ["run"] and len(sys.argv) == 4:
        cmd_run(sys.argv[2], [int(s) for s in sys.argv[3].split(",")])
    else:
        sys.exit(__doc__)
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)
