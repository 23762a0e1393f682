#!/usr/bin/env python3
"""Reference data for wgllm-core's quantization code, taken from the `gguf` Python package.

Run with gguf 0.19.0 and numpy 2.4.6 (`python3 -m pip install gguf==0.19.0 numpy`); other
versions may differ in edge cases.

    python3 scripts/gen_quant_vectors.py vectors   # writes crates/core/tests/data/quant/*.bin
    python3 scripts/gen_quant_vectors.py grids     # writes crates/core/src/quant/iq_grids.rs
    cargo fmt -p wgllm-core                        # the grids file is committed formatted

Vector file format (all little-endian), one file `<ggml type name>.bin` per type:

    magic    4 bytes  b"WGQV"
    version  u32      1
    type id  u32      the ggml_type id (DType::gguf_id)
    n_deq    u32      number of values in the dequantize section
    bytes    n_deq / block_size * type_size bytes: encoded blocks
    values   n_deq f32: what gguf.quants.dequantize gives for them
    n_q      u32      number of values in the quantize section (0: no reference quantizer)
    input    n_q f32
    bytes    n_q / block_size * type_size bytes: what gguf.quants.quantize gives

Q8_1, Q8_K, F64 and the integer types have no class in gguf.quants; their expected values are
computed here with numpy exactly as ggml's dequantize code does (d * q, or a plain cast).
"""

import struct
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES

ROOT = Path(__file__).resolve().parent.parent
VEC_DIR = ROOT / "crates/core/tests/data/quant"
GRID_RS = ROOT / "crates/core/src/quant/iq_grids.rs"

# Every ggml type wgllm's DType knows (crates/core/src/dtype.rs).
SUPPORTED = {
    "F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS",
    "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4",
}
# gguf 0.19.0 still lists Q8_1 as 40 bytes (f32 d and s, from before ggml switched to f16);
# ggml-common.h has `static_assert(sizeof(block_q8_1) == 2*sizeof(ggml_half) + QK8_1)`: 36.
SIZES = dict(GGML_QUANT_SIZES)
SIZES[T.Q8_1] = (32, 36)

QUANTIZABLE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.TQ1_0, T.TQ2_0, T.MXFP4]


def f16_bytes(values) -> bytes:
    return np.asarray(values, dtype=np.float16).tobytes()


def scale_f16(rng, n) -> np.ndarray:
    """Finite f16 scales of sensible magnitude (1e-4 .. 1), random sign."""
    mag = 10.0 ** rng.uniform(-4, 0, size=n)
    return (mag * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)


def random_blocks(qtype, rng, n_blocks) -> np.ndarray:
    """Random block bytes whose f16/f32 scale fields are finite and of sensible size."""
    bs, ts = SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)

    def put_f16(offset, positive=False):
        d = scale_f16(rng, n_blocks)
        if positive:
            d = np.abs(d)
        raw[:, offset:offset + 2] = d.view(np.uint8).reshape(n_blocks, 2)

    f16_fields = {
        T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
        T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
        T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
        T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
    }
    for off in f16_fields.get(qtype, []):
        put_f16(off)
    if qtype == T.Q8_K:
        d = (scale_f16(rng, n_blocks).astype(np.float32) * np.float32(0.01))
        raw[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    elif qtype == T.IQ1_M:
        # the f16 super-block scale lives in the top nibbles of the four u16 scale words
        d = scale_f16(rng, n_blocks).view(np.uint16)
        sc = raw[:, 48:56].copy().view(np.uint16)
        for k in range(4):
            nib = (d >> np.uint16(4 * k)) & np.uint16(0xF)
            sc[:, k] = (sc[:, k] & np.uint16(0x0FFF)) | (nib << np.uint16(12))
        raw[:, 48:56] = sc.view(np.uint8)
    elif qtype == T.MXFP4:
        e = rng.integers(110, 141, size=n_blocks)
        e[-1] = 254
        if n_blocks > 2:
            e[-2] = 0
            e[-3] = 1
        raw[:, 0] = e
    return raw


def quant_inputs(qtype, rng) -> np.ndarray:
    """f32 rows exercising zeros, tiny values, outliers, ties and rounding edges."""
    bs = SIZES[qtype][0]
    if qtype in (T.F16, T.BF16):
        return float_inputs(qtype, rng)
    blocks = [
        np.zeros(bs),
        rng.standard_normal(bs),
        rng.standard_normal(bs) * 1e-20,
        rng.standard_normal(bs) * 3e4,
        np.full(bs, 0.75),
    ]
    b = rng.standard_normal(bs) * 0.1
    b[bs // 3] = 100.0
    blocks.append(b)
    b = rng.standard_normal(bs) * 0.1
    b[bs - 1] = -100.0
    b[bs // 2] = 100.0  # same magnitude later: the first one must win
    blocks.append(b)
    # Values on exact rounding ties of the quantizer's grid.
    if qtype in (T.Q4_0, T.Q5_0, T.Q8_0, T.TQ1_0, T.TQ2_0):
        amax = {T.Q4_0: 8.0, T.Q5_0: 16.0, T.Q8_0: 127.0, T.TQ1_0: 1.0, T.TQ2_0: 1.0}[qtype]
        for sign in (1.0, -1.0):
            b = rng.integers(-4 * amax, 4 * amax + 1, size=bs) / 4.0
            b[0] = sign * amax
            blocks.append(b)
    elif qtype in (T.Q4_1, T.Q5_1):
        top = 15.0 if qtype == T.Q4_1 else 31.0
        b = rng.integers(0, 2 * top + 1, size=bs) / 2.0
        b[0], b[1] = 0.0, top
        blocks.append(b)
        blocks.append(b - 7.0)
    elif qtype == T.MXFP4:
        mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
        b = rng.choice(np.concatenate([mids, -mids]), size=bs)
        b[0] = 6.0
        blocks.append(b)
        for top in (4.0, 8.0, np.nextafter(np.float32(8.0), np.float32(0)), 0.5, 1024.0,
                    np.nextafter(np.float32(1024.0), np.float32(0))):
            b = rng.uniform(-1, 1, size=bs) * top
            b[3] = -top
            blocks.append(b)
    return np.concatenate(blocks).astype(np.float32)


def float_inputs(qtype, rng) -> np.ndarray:
    if qtype == T.F16:
        special = [1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), 65504.0, 65519.0, 65520.0, 1e6,
                   2**-24, 2**-25, 3 * 2**-25, 2**-26, 1e-8, 6e-5, -0.0, np.inf, -np.inf, np.nan]
    else:
        special = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.3895314e38, 3.4028235e38, 1e-40,
                   -1e-45, 1.17549435e-38, -0.0, np.inf, -np.inf, np.nan]
    vals = np.concatenate([np.array(special, dtype=np.float32),
                           rng.standard_normal(47).astype(np.float32) * np.float32(10.0)])
    return vals.astype(np.float32)


def reference_dequant(qtype, raw: np.ndarray) -> np.ndarray:
    n_blocks = raw.shape[0]
    if qtype == T.Q8_1:
        d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (raw[:, 4:36].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
    if qtype == T.Q8_K:
        d = raw[:, 0:4].copy().view(np.float32)
        return (d * raw[:, 4:260].copy().view(np.int8).astype(np.float32)).reshape(-1)
    out = gq.dequantize(raw.reshape(1, -1), qtype)
    assert out.dtype == np.float32
    return out.reshape(-1)


def plain_vectors(qtype, rng):
    """F32/F64/integers: (bytes, f32 values, quant input, quant bytes)."""
    np_type = {T.F32: np.float32, T.F64: np.float64, T.I8: np.int8, T.I16: np.int16,
               T.I32: np.int32, T.I64: np.int64}[qtype]
    if np.issubdtype(np_type, np.floating):
        src = np.concatenate([rng.standard_normal(60) * 1e3,
                              [1e300, -1e-300, 3.4028235e38 * 1.0000001, 2**-150, 3 * 2**-151]])
        src = src.astype(np_type)
        q_in = rng.standard_normal(40).astype(np.float32) * np.float32(100.0)
        return src.tobytes(), src.astype(np.float32), q_in, q_in.astype(np_type).tobytes()
    info = np.iinfo(np_type)
    src = rng.integers(info.min, info.max, size=60, dtype=np_type, endpoint=True)
    src[:4] = [info.min, info.max, 0, -1]
    small = min(info.max, 2**24)
    q_in = rng.integers(-small, small, size=40).astype(np.float32)
    q_in[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -3.75]
    q_in = q_in + np.where(np.abs(q_in) < 1e4, rng.choice([0.0, 0.25, 0.5, 0.75], size=40), 0.0)
    q_in = q_in.astype(np.float32)
    return src.tobytes(), src.astype(np.float32), q_in, np.rint(q_in).astype(np_type).tobytes()


def write_vectors() -> None:
    VEC_DIR.mkdir(parents=True, exist_ok=True)
    for qtype in T:
        if qtype.name not in SUPPORTED:
            continue
        rng = np.random.default_rng(0x5EED + int(qtype))
        bs, ts = SIZES[qtype]
        if qtype in (T.F32, T.F64, T.I8, T.I16, T.I32, T.I64):
            deq_bytes, deq_vals, q_in, q_bytes = plain_vectors(qtype, rng)
        else:
            if bs == 1:  # F16, BF16: every bit pattern is a valid input
                raw = rng.integers(0, 256, size=(160, ts), dtype=np.uint8)
            else:
                raw = random_blocks(qtype, rng, 3 if bs == 256 else 8)
            deq_bytes, deq_vals = raw.tobytes(), reference_dequant(qtype, raw)
            if qtype in QUANTIZABLE:
                q_in = quant_inputs(qtype, rng)
                with np.errstate(over="ignore", invalid="ignore"):
                    q_bytes = gq.quantize(q_in.reshape(1, -1), qtype).tobytes()
            else:
                q_in, q_bytes = np.zeros(0, dtype=np.float32), b""
        assert deq_vals.dtype == np.float32 and q_in.dtype == np.float32
        name = qtype.name.lower().replace("_k", "_K")
        with open(VEC_DIR / f"{name}.bin", "wb") as f:
            f.write(b"WGQV" + struct.pack("<III", 1, int(qtype), deq_vals.size))
            f.write(deq_bytes)
            f.write(deq_vals.astype("<f4").tobytes())
            f.write(struct.pack("<I", q_in.size))
            f.write(q_in.astype("<f4").tobytes())
            f.write(q_bytes)
    total = sum(p.stat().st_size for p in VEC_DIR.glob("*.bin"))
    print(f"wrote {len(list(VEC_DIR.glob('*.bin')))} files, {total} bytes", file=sys.stderr)


# --- IQ codebook grids -------------------------------------------------------------------

GRIDS = [
    # (class, rust name, element type)
    (gq.IQ2_XXS, "IQ2XXS", "u8"),
    (gq.IQ2_XS, "IQ2XS", "u8"),
    (gq.IQ2_S, "IQ2S", "u8"),
    (gq.IQ3_XXS, "IQ3XXS", "u8"),
    (gq.IQ3_S, "IQ3S", "u8"),
    (gq.IQ1_S, "IQ1S", "i8"),
]


def packed_rows(cls) -> list[int]:
    """One u16 per grid row: the package's hex digits, two bytes per row, little-endian."""
    raw = bytes.fromhex(cls.grid_hex.decode())
    rows = [raw[2 * i] | (raw[2 * i + 1] << 8) for i in range(len(raw) // 2)]
    assert len(rows) == cls.grid_shape[0]
    return rows


def unpack(rows, width, levels):
    bits = 16 // width
    return [[levels[(r >> (bits * i)) & ((1 << bits) - 1)] for i in range(width)] for r in rows]


def write_grids() -> None:
    out = [
        "//! Codebook grids of the IQ formats (`iq2xxs_grid`, `iq2xs_grid`, `iq2s_grid`, `iq3xxs_grid`,",
        "//! `iq3s_grid`, `iq1s_grid` in ggml's `ggml-common.h`).",
        "//!",
        "//! GENERATED by `python3 scripts/gen_quant_vectors.py grids` (then `cargo fmt`) from the",
        f"//! gguf {gguf_version()} package (`gguf/quants.py`: `grid_hex` and `grid_map` of each class).",
        "//! Do not edit by hand.",
        "//!",
        "//! Each row is stored the way the package stores it: one `u16` holding 8 two-bit (or, for the",
        "//! IQ3 grids, 4 four-bit) indices into the format's level map, lowest bits first. The rows are",
        "//! expanded into value tables at compile time.",
        "",
        "/// Expands packed rows into `W` values each, `16 / W` bits per index into `levels`.",
        "const fn expand<T: Copy, const N: usize, const W: usize>(rows: &[u16; N], levels: &[T]) -> [[T; W]; N] {",
        "    let bits = 16 / W;",
        "    let mask = (1u16 << bits) - 1;",
        "    let mut out = [[levels[0]; W]; N];",
        "    let mut r = 0;",
        "    while r < N {",
        "        let mut i = 0;",
        "        while i < W {",
        "            out[r][i] = levels[((rows[r] >> (bits * i)) & mask) as usize];",
        "            i += 1;",
        "        }",
        "        r += 1;",
        "    }",
        "    out",
        "}",
        "",
    ]
    for cls, name, ty in GRIDS:
        cls.init_grid()
        n, width = cls.grid_shape
        rows = packed_rows(cls)
        levels = [int(v) for v in cls.grid_map]
        expected = cls.grid.reshape(n, width).astype(np.int64).tolist()
        assert unpack(rows, width, levels) == expected, name
        lv = ", ".join(f"{v:#04x}" if ty == "u8" else str(v) for v in levels)
        out.append(f"const {name}_LEVELS: [{ty}; {len(levels)}] = [{lv}];")
        out.append(f"const {name}_PACKED: [u16; {n}] = [")
        for i in range(0, n, 12):
            out.append("    " + " ".join(f"{r:#06x}," for r in rows[i:i + 12]))
        out.append("];")
        out.append(f"/// `{name.lower()}_grid`: {n} rows of {width} values.")
        out.append(f"pub(super) static {name}_GRID: [[{ty}; {width}]; {n}] = expand(&{name}_PACKED, &{name}_LEVELS);")
        out.append("")
    GRID_RS.write_text("\n".join(out))
    print(f"wrote {GRID_RS}", file=sys.stderr)


def gguf_version() -> str:
    from importlib.metadata import version
    return version("gguf")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "vectors":
        write_vectors()
    elif what == "grids":
        write_grids()
    else:
        sys.exit(__doc__)
