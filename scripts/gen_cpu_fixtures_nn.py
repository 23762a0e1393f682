#!/usr/bin/env python3
"""Writes the numpy fixtures of the CPU backend's nn and shape op tests.

Every op here is an independent numpy (float64) statement of ggml's definition, written from the
math rather than from the Rust code:

  rms_norm, norm, l2_norm        ggml_rms_norm / ggml_norm / ggml_l2_norm
  soft_max                       ggml_soft_max_ext + ggml_soft_max_add_sinks (mask broadcast,
                                 ALiBi slopes, sinks as an extra logit in the denominator)
  rope                           ggml_rope_ext / ggml_rope_multi in every mode, with YaRN
                                 (ggml_rope_yarn_corr_dims, rope_yarn) and frequency factors;
                                 angles are computed as p * base^(-2k/n_dims) directly
  glu                            ggml_glu / ggml_glu_split, every variant
  upscale                        ggml_interpolate, bilinear and bicubic, with and without
                                 align-corners

The Rust tests (crates/cpu/tests/{nn_ops,shape_ops}.rs) read the JSON files written to
crates/cpu/tests/fixtures/nn/ and compare with explicit tolerances.

Format of a fixture:
    {"op": str, "params": {...},
     "inputs": {name: {"ne": [4 extents, innermost first], "data": [values in ne order]}},
     "expected": {"ne": [...], "data": [...]}}
Values carry 9 significant digits (exact for f32); -inf is the string "-inf". Inputs a test
feeds as f16 are already on the f16 grid; integer inputs (positions) are whole numbers.

Usage: python3 scripts/gen_cpu_fixtures_nn.py   (numpy only; deterministic)
"""

import json
import math
import os

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "cpu", "tests",
                   "fixtures", "nn")
rng = np.random.default_rng(0x6E6E)


def uniform(shape, lo=-1.0, hi=1.0):
    """f32 values of numpy shape `shape` (outermost first, always 4-D here)."""
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def encode(a):
    """A 4-D array (numpy order) as {"ne", "data"} with ne innermost first."""
    assert a.ndim == 4, a.shape
    vals = []
    for v in np.asarray(a, dtype=np.float64).ravel():
        if v == -math.inf:
            vals.append("-inf")
        else:
            assert math.isfinite(v), v
            vals.append(float(f"{v:.9g}"))
    return {"ne": list(reversed(a.shape)), "data": vals}


def write(name, op, params, inputs, expected):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name + ".json")
    doc = {"op": op, "params": params,
           "inputs": {k: encode(v) for k, v in inputs.items()},
           "expected": encode(expected)}
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{os.path.relpath(path)}: {os.path.getsize(path)} bytes")


# ---------------------------------------------------------------- norms

def rms_norm(x, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def layer_norm(x, eps):
    x = x.astype(np.float64)
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + eps)


def l2_norm(x, eps):
    x = x.astype(np.float64)
    return x / np.maximum(np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), eps)


def gen_norms():
    x = uniform((2, 3, 4, 24), -3.0, 3.0)
    x[0, 0, 0] += 5.0  # a row far from zero mean
    write("rms_norm", "RMS_NORM", {"eps": 1e-6}, {"a": x}, rms_norm(x, 1e-6))
    write("norm", "NORM", {"eps": 1e-5}, {"a": x}, layer_norm(x, 1e-5))
    # One row so small that its norm is below eps: that row is divided by eps instead.
    y = x.copy()
    y[1, 2, 3] = uniform((24,), -1e-8, 1e-8)
    write("l2_norm", "L2_NORM", {"eps": 1e-6}, {"a": y}, l2_norm(y, 1e-6))


# ---------------------------------------------------------------- soft_max

def alibi_slopes(n_head, max_bias):
    if max_bias <= 0.0:
        return np.ones(n_head)
    n2 = 2 ** int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n2)
    m1 = 2.0 ** (-max_bias / 2.0 / n2)
    return np.array([m0 ** (h + 1) if h < n2 else m1 ** (2 * (h - n2) + 1)
                     for h in range(n_head)])


def soft_max(a, mask, sinks, scale, max_bias):
    """a: (b, heads, rows, n); mask: (mb, mh, >= rows, n) broadcast over heads and batches."""
    b, h, rows, n = a.shape
    w = a.astype(np.float64) * scale
    if mask is not None:
        m = mask.astype(np.float64)
        m = m[np.arange(b) % m.shape[0]][:, np.arange(h) % m.shape[1]][:, :, :rows, :]
        w = w + alibi_slopes(h, max_bias)[None, :, None, None] * m
    if sinks is not None:
        s = np.broadcast_to(sinks.astype(np.float64).reshape(1, h, 1, 1), (b, h, rows, 1))
        w = np.concatenate([w, s], axis=-1)
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True))[..., :n]


def f16_grid(x):
    return x.astype(np.float16).astype(np.float32)


def gen_soft_max():
    # 6 heads (ALiBi: 4 heads on m0, 2 on m1), mask of 3 heads broadcast over 6, 2 batches
    # sharing one mask; 5 mask rows for 4 query rows; a causal -inf pattern plus random values.
    a = uniform((2, 6, 4, 10), -4.0, 4.0)
    mask = f16_grid(uniform((1, 3, 5, 10), -2.0, 0.0))
    for r in range(5):
        mask[0, :, r, 7 + min(r, 2):] = -math.inf
    sinks = uniform((1, 1, 1, 6), -1.0, 3.0)
    p = {"scale": 0.7, "max_bias": 8.0}
    write("soft_max_alibi_sinks", "SOFT_MAX", p, {"a": a, "mask": mask, "sinks": sinks},
          soft_max(a, mask, sinks[0, 0, 0], 0.7, 8.0))
    # f32 mask, one per head, no ALiBi, no sinks.
    b = uniform((1, 4, 3, 9), -6.0, 6.0)
    m32 = uniform((1, 4, 3, 9), -3.0, 1.0)
    m32[:, :, :, 0] = -math.inf
    p = {"scale": 1.25, "max_bias": 0.0}
    write("soft_max_mask_f32", "SOFT_MAX", p, {"a": b, "mask": m32},
          soft_max(b, m32, None, 1.25, 0.0))


# ---------------------------------------------------------------- rope

def yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow):
    def dim(n_rot):
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    return max(0.0, math.floor(dim(beta_fast))), min(n_dims - 1.0, math.ceil(dim(beta_slow)))


def section_of(mode, sections, k):
    """Position section (0=t, 1=h, 2=w, 3=e) and the pair where its angle last restarted."""
    sector = k % sum(sections)
    if mode == "InterleavedMultiSection":
        for s in (1, 2, 0):
            if sector % 3 == s and sector < 3 * sections[s]:
                return s, 0
        return 3, 0
    starts = np.cumsum([0] + list(sections))
    s = next(i for i in range(4) if sector < starts[i + 1]) if sector < starts[4] else 3
    # Only the vision mode restarts each section's angle where the section begins.
    return s, (k - (sector - starts[s]) if mode == "Vision" else 0)


def rope(x, pos, ff, p):
    """x: (batch, tokens, heads, head_dim); pos: (tokens,) or (4, tokens)."""
    mode, n_dims = p["mode"], p["n_dims"]
    head_dim = x.shape[-1]
    pairs = head_dim // 2 if mode == "Vision" else n_dims // 2
    low, high = yarn_corr_dims(n_dims, p["n_ctx_orig"], p["freq_base"], p["beta_fast"],
                               p["beta_slow"])
    out = x.astype(np.float64).copy()
    for t in range(x.shape[1]):
        for k in range(pairs):
            if mode in ("Normal", "Neox"):
                base_pos, restart = pos[t], 0
            else:
                s, restart = section_of(mode, p["sections"], k)
                base_pos = pos[s, t]
            extrap = base_pos * p["freq_base"] ** (-2.0 * (k - restart) / n_dims)
            extrap /= ff[k] if ff is not None else 1.0
            interp = p["freq_scale"] * extrap
            theta, mscale = interp, p["attn_factor"]
            if p["ext_factor"] != 0.0:
                ramp = 1.0 - min(1.0, max(0.0, (k - low) / max(0.001, high - low)))
                mix = ramp * p["ext_factor"]
                theta = interp * (1.0 - mix) + extrap * mix
                mscale *= 1.0 + 0.1 * math.log(1.0 / p["freq_scale"])
            c, s_ = math.cos(theta) * mscale, math.sin(theta) * mscale
            if mode == "Normal":
                i, j = 2 * k, 2 * k + 1
            elif mode == "Vision":
                i, j = k, k + n_dims
            else:
                i, j = k, k + n_dims // 2
            x0 = x[:, t, :, i].astype(np.float64)
            x1 = x[:, t, :, j].astype(np.float64)
            out[:, t, :, i] = x0 * c - x1 * s_
            out[:, t, :, j] = x0 * s_ + x1 * c
    return out


def gen_rope():
    yarn = {"n_ctx_orig": 4096, "freq_base": 10000.0, "freq_scale": 0.25, "ext_factor": 1.0,
            "attn_factor": 0.9, "beta_fast": 32.0, "beta_slow": 1.0}
    cases = [
        ("rope_normal_yarn", "Normal", 12, [0, 0, 0, 0], 16),
        ("rope_neox_yarn", "Neox", 12, [0, 0, 0, 0], 16),
        ("rope_mrope_yarn", "MultiSection", 12, [2, 1, 1, 1], 16),
        ("rope_imrope_yarn", "InterleavedMultiSection", 12, [2, 2, 1, 1], 16),
        ("rope_vision_yarn", "Vision", 8, [3, 1, 0, 0], 16),
    ]
    n_tokens, n_head = 3, 2
    for name, mode, n_dims, sections, head_dim in cases:
        p = dict(yarn, mode=mode, n_dims=n_dims, sections=sections)
        x = uniform((1, n_tokens, n_head, head_dim))
        multi = mode not in ("Normal", "Neox")
        pos = rng.integers(0, 40, size=(4, n_tokens) if multi else (n_tokens,))
        pairs = head_dim // 2 if mode == "Vision" else n_dims // 2
        ff = uniform((1, 1, 1, pairs), 1.0, 4.0)
        exp = rope(x, pos, ff[0, 0, 0], p)
        pos_in = pos.reshape(1, 1, 1, -1).astype(np.float32)
        write(name, "ROPE", p, {"x": x, "pos": pos_in, "freq_factors": ff}, exp)
    # Plain neox without YaRN or factors, larger positions.
    p = dict(yarn, mode="Neox", n_dims=16, sections=[0, 0, 0, 0], freq_scale=1.0,
             ext_factor=0.0, attn_factor=1.0, freq_base=500000.0)
    x = uniform((1, 4, 2, 16))
    pos = np.array([0, 1, 77, 200])
    write("rope_neox_plain", "ROPE", p, {"x": x, "pos": pos.reshape(1, 1, 1, -1).astype(
        np.float32)}, rope(x, pos, None, p))


# ---------------------------------------------------------------- glu

def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


GATES = {
    "Reglu": lambda x, g, _: np.maximum(x, 0.0) * g,
    "Geglu": lambda x, g, _: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                      * (x + 0.044715 * x ** 3))) * g,
    "Swiglu": lambda x, g, _: x * sigmoid(x) * g,
    "SwigluOai": lambda x, g, p: (np.minimum(x, p["limit"])
                                  * sigmoid(p["alpha"] * np.minimum(x, p["limit"]))
                                  * (np.clip(g, -p["limit"], p["limit"]) + 1.0)),
    "GegluErf": lambda x, g, _: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))) * g,
    "GegluQuick": lambda x, g, _: x * sigmoid(1.702 * x) * g,
}


def gen_glu():
    for i, (op, f) in enumerate(GATES.items()):
        p = {"op": op, "swapped": i % 2 == 1, "alpha": 1.702, "limit": 2.5}
        a = uniform((1, 2, 3, 16), -5.0, 5.0)
        x, g = a[..., :8].astype(np.float64), a[..., 8:].astype(np.float64)
        if p["swapped"]:
            x, g = g, x
        write(f"glu_{op.lower()}", "GLU", p, {"a": a}, f(x, g, p))
    for op in ("Swiglu", "SwigluOai"):
        p = {"op": op, "alpha": 1.702, "limit": 2.5}
        a, b = uniform((1, 1, 4, 6), -5.0, 5.0), uniform((1, 1, 4, 6), -5.0, 5.0)
        write(f"glu_split_{op.lower()}", "GLU", p, {"a": a, "b": b},
              GATES[op](a.astype(np.float64), b.astype(np.float64), p))


# ---------------------------------------------------------------- upscale

def cubic_weight(d, a=-0.75):
    """The cubic convolution kernel W(d) (Keys), |d| < 2."""
    d = abs(d)
    if d <= 1.0:
        return (a + 2.0) * d ** 3 - (a + 3.0) * d ** 2 + 1.0
    return a * d ** 3 - 5.0 * a * d ** 2 + 8.0 * a * d - 4.0 * a


def upscale(src, ne, mode, align):
    """src: (n3, n2, n1, n0); ne: target extents innermost first."""
    sne = list(reversed(src.shape))
    sf = [ne[d] / sne[d] for d in range(4)]
    off = 0.5
    if align:
        off = 0.0
        for d in (0, 1):
            if ne[d] > 1 and sne[d] > 1:
                sf[d] = (ne[d] - 1) / (sne[d] - 1)
    s = src.astype(np.float64)
    out = np.zeros((ne[3], ne[2], ne[1], ne[0]))

    def clampi(v, n):
        return min(max(v, 0), n - 1)

    for i3 in range(ne[3]):
        j3 = clampi(int(i3 / sf[3]), sne[3])
        for i2 in range(ne[2]):
            j2 = clampi(int(i2 / sf[2]), sne[2])
            plane = s[j3, j2]
            for i1 in range(ne[1]):
                y = (i1 + off) / sf[1] - off
                for i0 in range(ne[0]):
                    x = (i0 + off) / sf[0] - off
                    if mode == "Bilinear":
                        xa, ya = clampi(math.floor(x), sne[0]), clampi(math.floor(y), sne[1])
                        xb, yb = clampi(math.floor(x) + 1, sne[0]), clampi(math.floor(y) + 1,
                                                                           sne[1])
                        dx = min(max(x - xa, 0.0), 1.0)
                        dy = min(max(y - ya, 0.0), 1.0)
                        v = (plane[ya, xa] * (1 - dx) * (1 - dy) + plane[ya, xb] * dx * (1 - dy)
                             + plane[yb, xa] * (1 - dx) * dy + plane[yb, xb] * dx * dy)
                    else:
                        x0, y0 = math.floor(x), math.floor(y)
                        v = 0.0
                        for oy in (-1, 0, 1, 2):
                            wy = cubic_weight(y - (y0 + oy))
                            for ox in (-1, 0, 1, 2):
                                wx = cubic_weight(x - (x0 + ox))
                                v += wy * wx * plane[clampi(y0 + oy, sne[1]),
                                                     clampi(x0 + ox, sne[0])]
                    out[i3, i2, i1, i0] = v
    return out


def gen_upscale():
    src = uniform((1, 2, 3, 4), -2.0, 2.0)
    for mode in ("Bilinear", "Bicubic"):
        for align in (False, True):
            ne = [7, 5, 3, 1]
            name = f"upscale_{mode.lower()}{'_align' if align else ''}"
            write(name, "UPSCALE", {"mode": mode, "align_corners": align, "ne": ne},
                  {"a": src}, upscale(src, ne, mode, align))
    down = uniform((1, 1, 5, 6), -2.0, 2.0)
    ne = [4, 3, 1, 1]
    write("upscale_bilinear_down", "UPSCALE",
          {"mode": "Bilinear", "align_corners": False, "ne": ne}, {"a": down},
          upscale(down, ne, "Bilinear", False))


if __name__ == "__main__":
    gen_norms()
    gen_soft_max()
    gen_rope()
    gen_glu()
    gen_upscale()
