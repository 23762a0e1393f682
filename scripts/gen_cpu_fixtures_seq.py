#!/usr/bin/env python3
"""Writes the numpy fixtures of the CPU backend's attention / sequence / convolution tests.

Each op is implemented here independently of the Rust code, straight from ggml's definitions
(ggml.c builders, ggml-cpu/ops.cpp kernels), with plain numpy in float64. The Rust tests in
crates/cpu/tests/{attn_ops,seq_ops}.rs load the JSON files this writes into
crates/cpu/tests/fixtures/seq/ and compare with explicit tolerances.

Fixture format:
    {"op": name, "params": {...},
     "inputs": {name: {"ne": [4 extents], "data": [values in ne order]}},
     "expected": {"ne": [...], "data": [...]}}
Values are written with 9 significant digits (exact for f32); -inf is written as the string
"-inf". Quantized K/V and expert weights are given on the grid of their format (the values a
q8_0 / q4_0 / f16 round trip produces), so the Rust test converts them to that format losslessly.

Usage: python3 scripts/gen_cpu_fixtures_seq.py   (numpy only; deterministic)
"""

import json
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "cpu", "tests", "fixtures", "seq")
rng = np.random.default_rng(20240607)


def rand(*shape, lo=-1.0, hi=1.0):
    """Random f32 values; `shape` is numpy order (outermost first)."""
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def enc(a):
    """An array as fixture data: ne innermost first, values flattened in C order."""
    ne = list(reversed(a.shape)) + [1] * (4 - a.ndim)
    data = []
    for v in np.asarray(a, dtype=np.float64).ravel():
        data.append("-inf" if v == -math.inf else float(format(v, ".9g")))
    return {"ne": ne, "data": data}


def write(name, op, params, inputs, expected):
    path = os.path.join(OUT, name + ".json")
    with open(path, "w") as f:
        json.dump(
            {"op": op, "params": params, "inputs": {k: enc(v) for k, v in inputs.items()},
             "expected": enc(expected)},
            f, separators=(",", ":"))
    print(f"{path}: {os.path.getsize(path)} bytes")


# ---- quantization grids (ggml-quants.c reference quantizers, then dequantized) ----

def f16_grid(x):
    return x.astype(np.float16).astype(np.float32)


def q8_0_grid(x):
    """quantize_row_q8_0_ref then dequantize: d = amax/127 stored as f16, q = round(x/d)."""
    b = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / 127.0
    idd = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
    v = b * idd
    q = np.trunc(v + np.copysign(0.5, v))  # roundf: half away from zero
    d16 = d.astype(np.float16).astype(np.float32)
    return (q * d16).astype(np.float32).reshape(x.shape)


def q4_0_grid(x):
    """quantize_row_q4_0_ref then dequantize: d = max/-8 (max = signed value of largest |x|)."""
    b = x.reshape(-1, 32).astype(np.float32)
    idx = np.abs(b).argmax(axis=1)
    mx = b[np.arange(b.shape[0]), idx][:, None]
    d = mx / -8.0
    idd = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0.0).astype(np.float32)
    q = np.minimum(15, np.trunc(b * idd + 8.5))
    d16 = d.astype(np.float16).astype(np.float32)
    return ((q - 8) * d16).astype(np.float32).reshape(x.shape)


# ---- flash_attn_ext ----

def alibi_slope(h, n_head, max_bias):
    if max_bias <= 0:
        return 1.0
    n_log2 = 2 ** int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1)


def flash_attn(q, k, v, mask, sinks, scale, max_bias, softcap):
    """q [B, H, nq, d], k [B, Hkv, nkv, d], v [B, Hkv, nkv, dv], mask [m3, m2, nq_pad, nkv].
    Returns [B, nq, H, dv] (ggml's permuted result)."""
    B, H, nq, _ = q.shape
    hkv, dv = k.shape[1], v.shape[3]
    out = np.zeros((B, nq, H, dv))
    for b in range(B):
        for h in range(H):
            kh, vh = k[b, h // (H // hkv)].astype(np.float64), v[b, h // (H // v.shape[1])]
            slope = alibi_slope(h, H, max_bias)
            for i in range(nq):
                s = kh @ q[b, h, i].astype(np.float64) * scale
                if softcap != 0:
                    s = softcap * np.tanh(s / softcap)
                if mask is not None:
                    m = mask[b % mask.shape[0], h % mask.shape[1], i].astype(np.float64)
                    s = s + slope * m
                logits = list(s) + ([float(sinks[h])] if sinks is not None else [])
                finite = [x for x in logits if x != -math.inf]
                if not finite:
                    continue
                mx = max(finite)
                w = np.exp(np.array(logits) - mx)
                den = w.sum()
                out[b, i, h] = (w[: len(s)] @ vh.astype(np.float64)) / den
    return out


def gen_flash_attn():
    # f16 K/V, per-head mask (broadcast over 2 of 4 heads) padded to 4 rows, ALiBi, softcap,
    # sinks, GQA 4:2, batch 2.
    B, H, hkv, nq, nkv, d, dv = 2, 4, 2, 3, 6, 8, 5
    q = rand(B, H, nq, d)
    k = f16_grid(rand(B, hkv, nkv, d))
    v = f16_grid(rand(B, hkv, nkv, dv))
    mask = f16_grid(rand(1, 2, 4, nkv, lo=-2, hi=0))
    mask[0, 0, 0, 4:] = -np.inf
    mask[0, 1, 2, 0] = -np.inf
    sinks = rand(H)
    p = {"scale": 0.35, "max_bias": 8.0, "logit_softcap": 3.0}
    out = flash_attn(q, k, v, mask, sinks, p["scale"], p["max_bias"], p["logit_softcap"])
    write("flash_attn_f16", "flash_attn_ext", {**p, "k": "f16", "v": "f16", "mask": "f16"},
          {"q": q, "k": k, "v": v, "mask": mask, "sinks": sinks}, out)

    # q8_0 K read through a permuted view, q4_0 V, f32 mask shared by all heads with one fully
    # masked query row (-> zeros), MQA 3:1, no ALiBi, no softcap, no sinks.
    B, H, hkv, nq, nkv, d, dv = 1, 3, 1, 3, 9, 32, 32
    q = rand(B, H, nq, d)
    k = q8_0_grid(rand(B, hkv, nkv, d))
    v = q4_0_grid(rand(B, hkv, nkv, dv))
    mask = rand(1, 1, nq, nkv, lo=-1, hi=0)
    mask[0, 0, 1, :] = -np.inf
    mask[0, 0, 2, 5:] = -np.inf
    p = {"scale": 1.0 / math.sqrt(d), "max_bias": 0.0, "logit_softcap": 0.0}
    out = flash_attn(q, k, v, mask, None, p["scale"], 0.0, 0.0)
    write("flash_attn_q8_q4", "flash_attn_ext", {**p, "k": "q8_0", "v": "q4_0", "mask": "f32"},
          {"q": q, "k": k, "v": v, "mask": mask}, out)


# ---- mul_mat_id ----

def gen_mul_mat_id():
    n_expert, m, kk, n_used, n_tok = 4, 3, 32, 2, 3
    experts = q8_0_grid(rand(n_expert, m, kk))
    for b_used, name in ((1, "mul_mat_id_bcast"), (n_used, "mul_mat_id")):
        b = rand(n_tok, b_used, kk)
        ids = np.array([[3, 1], [0, 3], [2, 2]], dtype=np.float32)  # [n_tok, n_used]
        out = np.zeros((n_tok, n_used, m))
        for t in range(n_tok):
            for e in range(n_used):
                out[t, e] = experts[int(ids[t, e])].astype(np.float64) @ b[t, e % b_used]
        write(name, "mul_mat_id", {"experts": "q8_0"},
              {"experts": experts, "b": b, "ids": ids}, out)


# ---- ssm_scan ----

def softplus(x):
    return x if x > 20 else math.log1p(math.exp(x))


def ssm_scan(s, x, dt, A, B, C, ids):
    """s [n_rs, nh, hd, ds], x [ns, nt, nh, hd], dt [ns, nt, nh], A [nh, 1|ds],
    B, C [ns, nt, ng, ds]. Returns y flattened then final states flattened."""
    ns, nt, nh, hd = x.shape
    ng = B.shape[2]
    y = np.zeros(x.shape)
    states = np.zeros((ns,) + s.shape[1:])
    for seq in range(ns):
        st = s[int(ids[seq])].astype(np.float64).copy()
        for t in range(nt):
            for h in range(nh):
                dtp = softplus(float(dt[seq, t, h]))
                g = h // (nh // ng)
                dA = np.exp(dtp * A[h].astype(np.float64))  # broadcasts for Mamba-2
                st[h] = st[h] * dA + np.outer(x[seq, t, h] * dtp, B[seq, t, g])
                y[seq, t, h] = st[h] @ C[seq, t, g]
        states[seq] = st
    return np.concatenate([y.ravel(), states.ravel()])


def gen_ssm_scan():
    # Mamba-2: scalar decay per head, 2 groups, states picked by ids from 3 slots.
    n_rs, nh, hd, ds, ns, nt, ng = 3, 4, 3, 8, 2, 3, 2
    s = rand(n_rs, nh, hd, ds)
    x = rand(ns, nt, nh, hd)
    dt = rand(ns, nt, nh, lo=-2, hi=2)
    A = -rand(nh, 1, lo=0.2, hi=1.5)
    B, C = rand(ns, nt, ng, ds), rand(ns, nt, ng, ds)
    ids = np.array([2, 0], dtype=np.float32)
    write("ssm_scan_mamba2", "ssm_scan", {},
          {"s": s, "x": x, "dt": dt, "A": A, "B": B, "C": C, "ids": ids},
          ssm_scan(s, x, dt, A, B, C, ids))
    # Mamba-1: head_dim 1, per-state decay A [d_inner, d_state], one group.
    n_rs, nh, hd, ds, ns, nt, ng = 2, 6, 1, 4, 2, 4, 1
    s = rand(n_rs, nh, hd, ds)
    x = rand(ns, nt, nh, hd)
    dt = rand(ns, nt, nh, lo=-2, hi=2)
    A = -rand(nh, ds, lo=0.2, hi=1.5)
    B, C = rand(ns, nt, ng, ds), rand(ns, nt, ng, ds)
    ids = np.array([1, 0], dtype=np.float32)
    write("ssm_scan_mamba1", "ssm_scan", {},
          {"s": s, "x": x, "dt": dt, "A": A, "B": B, "C": C, "ids": ids},
          ssm_scan(s, x, dt, A, B, C, ids))


# ---- gated_delta_net ----

def gated_delta_net(q, k, v, g, beta, state):
    """q, k [nsk, T, Hk, S]; v [N, T, H, S]; g [N, T, H, 1|S]; beta [N, T, H, 1];
    state [N, H, S, S] stored transposed (state[n, h, j, i] = M[i][j]).
    Returns outputs [N, T, H, S] then final states (same storage), flattened."""
    N, T, H, S = v.shape
    out = np.zeros(v.shape)
    final = np.zeros(state.shape)
    for n in range(N):
        for h in range(H):
            M = state[n, h].T.astype(np.float64).copy()  # M[i][j], i key index, j value index
            nq = n // (N // q.shape[0])
            nk = n // (N // k.shape[0])
            for t in range(T):
                qv = q[nq, t, h % q.shape[2]].astype(np.float64)
                kv = k[nk, t, h % k.shape[2]].astype(np.float64)
                M = M * np.exp(g[n, t, h].astype(np.float64))[:, None]
                delta = (v[n, t, h] - M.T @ kv) * beta[n, t, h, 0]
                M = M + np.outer(kv, delta)
                out[n, t, h] = (M.T @ qv) / math.sqrt(S)
            final[n, h] = M.T
    return np.concatenate([out.ravel(), final.ravel()])


def gen_gated_delta_net():
    N, T, H, Hk, S = 2, 3, 4, 2, 4
    for name, g_rows, nsk in (("gdn_scalar_gate", 1, 1), ("gdn_kda", S, 2)):
        q, k = rand(nsk, T, Hk, S), rand(nsk, T, Hk, S)
        v = rand(N, T, H, S)
        g = rand(N, T, H, g_rows, lo=-1.0, hi=0.0)
        beta = rand(N, T, H, 1, lo=0.0, hi=1.0)
        state = rand(N, H, S, S)
        write(name, "gated_delta_net", {},
              {"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state},
              gated_delta_net(q, k, v, g, beta, state))


# ---- conv_2d / im2col ----

def tap(o, kx, s, p, d, n):
    i = o * s + kx * d - p
    return i if 0 <= i < n else None


def gen_conv():
    stride, pad, dil = [2, 1], [1, 2], [1, 2]
    kernel = rand(3, 2, 3, 3)  # [C_out, C_in, KH, KW]
    inp = rand(2, 2, 6, 7)  # [N, C_in, H, W]
    N, C, IH, IW = inp.shape
    CO, _, KH, KW = kernel.shape
    OW = (IW + 2 * pad[0] - dil[0] * (KW - 1) - 1) // stride[0] + 1
    OH = (IH + 2 * pad[1] - dil[1] * (KH - 1) - 1) // stride[1] + 1
    cols = np.zeros((N, OH, OW, C * KH * KW))
    for n in range(N):
        for oy in range(OH):
            for ox in range(OW):
                for c in range(C):
                    for ky in range(KH):
                        for kx in range(KW):
                            x = tap(ox, kx, stride[0], pad[0], dil[0], IW)
                            y = tap(oy, ky, stride[1], pad[1], dil[1], IH)
                            if x is not None and y is not None:
                                cols[n, oy, ox, (c * KH + ky) * KW + kx] = inp[n, c, y, x]
    params = {"stride": stride, "pad": pad, "dilation": dil}
    write("im2col_2d", "im2col", {**params, "is_2d": True},
          {"kernel": kernel, "input": inp}, cols)
    # conv = im2col rows dotted with the flattened kernels: out [N, C_out, OH, OW].
    conv = np.einsum("nyxk,ok->noyx", cols, kernel.reshape(CO, -1).astype(np.float64))
    write("conv_2d", "conv_2d", params, {"kernel": kernel, "input": inp}, conv)

    # 1-D im2col: input [N, C, W], kernel [C_out, C, KW], result [N, OW, C*KW].
    k1, x1 = rand(2, 3, 3), rand(2, 3, 9)
    s0, p0, d0 = 2, 2, 2
    N, C, W = x1.shape
    KW = k1.shape[2]
    OW = (W + 2 * p0 - d0 * (KW - 1) - 1) // s0 + 1
    cols1 = np.zeros((N, OW, C * KW))
    for n in range(N):
        for ox in range(OW):
            for c in range(C):
                for kx in range(KW):
                    x = tap(ox, kx, s0, p0, d0, W)
                    if x is not None:
                        cols1[n, ox, c * KW + kx] = x1[n, c, x]
    write("im2col_1d", "im2col",
          {"stride": [s0, 1], "pad": [p0, 0], "dilation": [d0, 1], "is_2d": False},
          {"kernel": k1, "input": x1}, cols1)


def main():
    os.makedirs(OUT, exist_ok=True)
    gen_flash_attn()
    gen_mul_mat_id()
    gen_ssm_scan()
    gen_gated_delta_net()
    gen_conv()


if __name__ == "__main__":
    main()
