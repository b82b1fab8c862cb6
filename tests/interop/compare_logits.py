"""tests/interop/compare_logits.py — `make check-llamacpp`'s logits step: aahd's and llama.cpp's logits of one GGUF
over one prompt, beside tests/gguf_ref.py's float64 pass of the dequantized weights with the activations rounded as
both engines' CPU products round them (Q8_0 blocks for Q8_0/Q4_0 weights, Q8_K for the K types).

    compare_logits.py NAME T AAH.f32 LLAMACPP.f32 REF.f64 ACT.f64 BOUND

Prints one line; exits 1 when max|aahd - llama.cpp| exceeds BOUND * (1 + max|logit|).
"""
import sys

import numpy as np

name, T = sys.argv[1], int(sys.argv[2])
a = np.fromfile(sys.argv[3], "<f4").astype(np.float64).reshape(T, -1)
lc = np.fromfile(sys.argv[4], "<f4").astype(np.float64).reshape(T, -1)
ref = np.fromfile(sys.argv[5], "<f8").reshape(T, -1)
act = np.fromfile(sys.argv[6], "<f8").reshape(T, -1)
bound = float(sys.argv[7])
s = 1 + np.abs(ref).max()


def rel(x, y):
    return np.abs(x - y).max() / s


d = rel(a, lc)
same = int((a.argmax(1) == lc.argmax(1)).sum())
print(f"{name:22s} T {T:3d}  max|logit| {s - 1:5.2f}  |aahd-llama.cpp| {d:.1e}  |aahd-ref| {rel(a, act):.1e}  "
      f"|llama.cpp-ref| {rel(lc, act):.1e}  (rounding itself moves ref by {rel(act, ref):.1e})  "
      f"greedy equal {same}/{T}  bound {bound:.0e}  {'ok' if d <= bound else 'FAIL'}")
sys.exit(0 if d <= bound else 1)
