//! The closed op set of the graph IR: ggml's WebGPU op table, with typed parameters.
//!
//! Each variant documents its sources (`srcs[i]`, `None` where an optional source is absent) and
//! its semantics by naming the ggml function it mirrors. Backends `match` on `Op` without a
//! catch-all arm, so adding a variant makes every backend say what it does with it.

/// Binary element-wise ops; `srcs = [a, b]`, `b` broadcast (repeated) over `a` (ggml_add…).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// Unary element-wise ops; `srcs = [a]`, result has `a`'s extents (ggml_unary and friends).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Abs,
    Sgn,
    Neg,
    Step,
    Tanh,
    Elu,
    Relu,
    Sigmoid,
    /// tanh approximation, as ggml_gelu.
    Gelu,
    GeluQuick,
    GeluErf,
    Silu,
    Hardswish,
    Hardsigmoid,
    Exp,
    Expm1,
    Softplus,
    Floor,
    Ceil,
    Round,
    Trunc,
    /// ggml_xielu(a, alpha_n, alpha_p, beta, eps).
    Xielu {
        alpha_n: f32,
        alpha_p: f32,
        beta: f32,
        eps: f32,
    },
    Log,
    Sqr,
    Sqrt,
    Sin,
    Cos,
}

/// Gated linear units (ggml_glu / ggml_glu_split).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GluOp {
    Reglu,
    Geglu,
    Swiglu,
    /// gpt-oss: `x = min(a, limit); g = clamp(b, -limit, limit); x*sigmoid(alpha*x)*(g+1)`.
    SwigluOai {
        alpha: f32,
        limit: f32,
    },
    GegluErf,
    GegluQuick,
}

/// RoPE flavours (ggml's GGML_ROPE_TYPE_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// Rotates adjacent pairs (x[2i], x[2i+1]).
    Normal,
    /// Rotates (x[i], x[i + n_dims/2]).
    Neox,
    /// Multi-section (Qwen2-VL): positions has 4 sections per token.
    MultiSection,
    /// Interleaved multi-section (Qwen3-VL).
    InterleavedMultiSection,
    /// Vision (2-D) rope.
    Vision,
}

/// Parameters of ggml_rope_ext / ggml_rope_multi.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub mode: RopeMode,
    /// Rotated dimensions (the first `n_dims` of each head).
    pub n_dims: u32,
    /// Section sizes of the multi-section and vision modes; zero otherwise.
    pub sections: [u32; 4],
    /// Original training context (YaRN).
    pub n_ctx_orig: u32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain RoPE over the first `n_dims` of each head: base 10,000, no context scaling or
    /// YaRN (ext_factor 0), ggml's default YaRN betas (32, 1) and a 4096-position original
    /// context. Callers override what their model sets: `RopeParams { freq_base, ..new }`.
    pub fn new(mode: RopeMode, n_dims: u32) -> RopeParams {
        RopeParams {
            mode,
            n_dims,
            sections: [0; 4],
            n_ctx_orig: 4096,
            freq_base: 10_000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// Which triangle ggml_tri keeps (ggml_tri_type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TriKind {
    UpperDiag,
    Upper,
    LowerDiag,
    Lower,
}

/// Sort direction of ggml_argsort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    Asc,
    Desc,
}

/// The per-row parameters of [`Op::Sample`], held in its F32 `params` source as
/// [`SampleParams::WORDS`] values in this order: `r`, `temperature`, `top_p`, `min_p`, `top_k`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleParams {
    /// The uniform draw in `[0, 1)`.
    pub r: f32,
    /// 0 or below (or NaN): the first candidate (the argmax).
    pub temperature: f32,
    /// Keep the smallest prefix whose probability reaches `top_p` (1 or more: all).
    pub top_p: f32,
    /// Drop candidates less likely than `min_p` × the first one (0 or less: none).
    pub min_p: f32,
    /// Keep the first `top_k` candidates (0, or more than there are: all).
    pub top_k: u32,
}

impl SampleParams {
    /// Values per row of the `params` source.
    pub const WORDS: u64 = 5;

    /// Greedy: the first candidate, whatever `r`.
    pub const ARGMAX: SampleParams = SampleParams {
        r: 0.0,
        temperature: 0.0,
        top_p: 1.0,
        min_p: 0.0,
        top_k: 0,
    };

    /// The row of the `params` source, as f32 values (`top_k` exactly, as it is at most 2^24).
    pub fn values(&self) -> [f32; 5] {
        [
            self.r,
            self.temperature,
            self.top_p,
            self.min_p,
            self.top_k.min(1 << 24) as f32,
        ]
    }

    /// Little-endian bytes of [`SampleParams::values`].
    pub fn to_bytes(&self) -> Vec<u8> {
        self.values().iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The parameters of a row of the `params` source (a negative or fractional `top_k`
    /// truncates toward 0).
    pub fn from_values(v: [f32; 5]) -> SampleParams {
        SampleParams {
            r: v[0],
            temperature: v[1],
            top_p: v[2],
            min_p: v[3],
            top_k: v[4].max(0.0) as u32,
        }
    }

    /// The index of the candidate drawn from `vals` (logits, largest first): [`Op::Sample`]'s
    /// arithmetic, f32 throughout with every sum in candidate order (`sample.wgsl` follows it
    /// step by step). The CPU backend's SAMPLE
    /// and wgllm-models' host sampler both call this, so on that backend a step's drawn token
    /// is the host's draw from the same candidates and uniform.
    pub fn pick(&self, vals: &[f32]) -> usize {
        // NaN is greedy too, as sample.wgsl's `temp > 0.0` takes it.
        if self.temperature.is_nan() || self.temperature <= 0.0 || vals.len() <= 1 {
            return 0;
        }
        let n = match self.top_k as usize {
            0 => vals.len(),
            k => k.min(vals.len()),
        };
        let vals = &vals[..n];
        let probs = softmax(vals);
        let mut keep = n;
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, q) in probs.iter().enumerate() {
                acc += q;
                if acc >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.min_p > 0.0 {
            let floor = probs[0] * self.min_p;
            keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
        }
        let keep = keep.max(1);
        // The maximum is subtracted before the division: `v / temperature` overflows to inf
        // for a tiny temperature, and inf - inf would make every probability NaN.
        let m = vals[..keep]
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let scaled: Vec<f32> = vals[..keep]
            .iter()
            .map(|v| (v - m) / self.temperature)
            .collect();
        let mut acc = 0.0;
        for (i, q) in softmax(&scaled).iter().enumerate() {
            acc += q;
            if self.r < acc {
                return i;
            }
        }
        keep - 1
    }
}

/// `softmax(x)`: the maximum subtracted, the exps summed in order.
fn softmax(x: &[f32]) -> Vec<f32> {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|v| (v - m).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// Interpolation of ggml_upscale / ggml_interpolate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleMode {
    Nearest,
    Bilinear { align_corners: bool },
    Bicubic { align_corners: bool },
}

/// One node's operation. The result's dtype and layout live on the node.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    // ---- leaves ----
    /// Bytes supplied to every run (tokens, positions, masks).
    Input,
    /// Constant bytes given when the graph is built (model weights); see `Graph::weight_data`.
    Weight,
    /// Persistent storage, zero at compile time, kept across runs (KV cache, recurrent state).
    State,

    // ---- layout only: the result aliases `srcs[0]`'s storage ----
    /// ggml_view_4d: explicit extents, strides and offset.
    View,
    /// ggml_reshape: same contiguous bytes, new extents.
    Reshape,
    /// ggml_permute: source dim `i` becomes result dim `axes[i]`.
    Permute {
        axes: [usize; 4],
    },
    /// ggml_transpose: swaps dims 0 and 1.
    Transpose,

    // ---- data movement ----
    /// ggml_cpy: `srcs = [dst, src]`; writes `src` (converted to dst's dtype) into `dst` in place;
    /// the result aliases `dst`.
    Cpy,
    /// ggml_cont / ggml_cast: contiguous copy of `srcs[0]`, converted to the node's dtype.
    Cont,
    /// ggml_set: `srcs = [a, b]`; a copy of `a` with `b` written into the view of `a` at byte
    /// `offset` with strides `nb` (dims 1..3).
    Set {
        nb: [u64; 3],
        offset: u64,
    },
    /// ggml_set_rows: `srcs = [dst, src, idx]`; row `idx[i]` of `dst` gets row `i` of `src`
    /// (converted), in place; idx is I32 or I64, broadcast over dims 2,3. Result aliases `dst`.
    SetRows,
    /// ggml_get_rows: `srcs = [table, idx]`; rows of `table` (any dtype, dequantized) at `idx`.
    GetRows,
    /// ggml_concat along `dim`: `srcs = [a, b]`.
    Concat {
        dim: usize,
    },
    /// ggml_repeat: `srcs = [a]`, tiled to the node's extents.
    Repeat,
    /// ggml_pad_ext: `lp`/`rp` zeros before/after each dim (or wrap-around values when `circular`).
    Pad {
        lp: [u32; 4],
        rp: [u32; 4],
        circular: bool,
    },
    /// ggml_diag: `[n, 1, b2, b3]` → `[n, n, b2, b3]` diagonal matrices.
    Diag,
    /// ggml_tri: keeps one triangle of each matrix, zero elsewhere.
    Tri {
        kind: TriKind,
    },
    /// ggml_fill: every element set to `value`.
    Fill {
        value: f32,
    },

    // ---- matrix ----
    /// ggml_mul_mat: `srcs = [a, b]`, result `[a.ne1, b.ne1, b.ne2, b.ne3]`,
    /// `r[i, j] = Σ_k a[k, i] * b[k, j]`, `a` broadcast over `b`'s dims 2 and 3.
    MulMat,
    /// ggml_mul_mat_id (MoE): `srcs = [experts, b, ids]`.
    MulMatId,
    /// ggml_solve_tri(a, b, left, lower, uni): solves a triangular system.
    SolveTri {
        left: bool,
        lower: bool,
        uni: bool,
    },
    /// ggml_conv_2d_direct: `srcs = [kernel, input]`.
    Conv2d {
        stride: [u32; 2],
        pad: [u32; 2],
        dilation: [u32; 2],
    },
    /// ggml_im2col: `srcs = [kernel, input]`; result dtype is the node's.
    Im2Col {
        stride: [u32; 2],
        pad: [u32; 2],
        dilation: [u32; 2],
        is_2d: bool,
    },

    // ---- element-wise ----
    Binary(BinaryOp),
    /// ggml_add_id: `srcs = [a, b, ids]`, `a[:, i1, i2] + b[:, ids[i1, i2]]`.
    AddId,
    Unary(UnaryOp),
    /// ggml_clamp.
    Clamp {
        min: f32,
        max: f32,
    },
    /// ggml_scale_bias: `a * scale + bias`.
    Scale {
        scale: f32,
        bias: f32,
    },
    /// ggml_glu: `srcs = [a]` (gate and value are the two halves of each row; `swapped` exchanges
    /// them) or `srcs = [a, b]` (ggml_glu_split: `a` is gated, `b` is the linear part).
    Glu {
        op: GluOp,
        swapped: bool,
    },

    // ---- normalization ----
    RmsNorm {
        eps: f32,
    },
    Norm {
        eps: f32,
    },
    L2Norm {
        eps: f32,
    },
    /// ggml_soft_max_ext: `srcs = [a, mask?, sinks?]`; `softmax(a*scale + slope*mask)` per row.
    SoftMax {
        scale: f32,
        max_bias: f32,
    },
    /// ggml_rope_ext / ggml_rope_multi: `srcs = [x, positions (I32), freq_factors?]`.
    Rope(RopeParams),
    /// ggml_flash_attn_ext: `srcs = [q, k, v, mask?, sinks?]`; result `[dv, n_head, n_q, batch]`.
    FlashAttnExt {
        scale: f32,
        max_bias: f32,
        logit_softcap: f32,
    },

    // ---- reductions and sorting ----
    /// ggml_sum: one value, the sum of all elements.
    Sum,
    /// ggml_sum_rows: `[1, ne1, ne2, ne3]`.
    SumRows,
    /// ggml_cumsum along dim 0.
    CumSum,
    /// ggml_argmax: I32 index of the largest value of each row.
    ArgMax,
    /// ggml_argsort: I32 indices sorting each row.
    ArgSort {
        order: SortOrder,
    },
    /// ggml_top_k: I32 indices of the `k` largest values of each row, largest first.
    TopK {
        k: u32,
    },
    /// Draws one candidate per row (no ggml counterpart: llama.cpp's default sampler chain on
    /// the device). `srcs = [vals, ids, params]`: F32 `vals` `[k, rows]`, the candidates'
    /// logits largest first (ties in id order, as `TOP_K` leaves them); I32 `ids` `[k, rows]`,
    /// their token ids; F32 `params` `[SampleParams::WORDS, rows]` ([`SampleParams`]). Result
    /// I32 `[rows]`: with `temperature <= 0` (or NaN) the first id; else the candidates are cut
    /// to the first `top_k`, `p = softmax(vals)`, cut to the shortest prefix whose running sum
    /// of `p` reaches `top_p` (when `top_p < 1`), then to the leading candidates with `p >=
    /// min_p · p[0]` (when `min_p > 0`, at least one), and the id returned is the first whose
    /// running sum of `softmax(vals / temperature)` over those exceeds `r` (the last one when
    /// none does). Every sum runs in candidate order: [`SampleParams::pick`].
    Sample,

    // ---- sequence models ----
    /// ggml_ssm_conv: `srcs = [conv_x, conv_weight]`.
    SsmConv,
    /// ggml_ssm_scan: `srcs = [s, x, dt, A, B, C, ids]`.
    SsmScan,
    /// ggml_gated_delta_net: `srcs = [q, k, v, g, beta, state]`.
    GatedDeltaNet,
    /// ggml_interpolate: resizes dims 0..3 to the node's extents.
    Upscale {
        mode: ScaleMode,
    },
}

impl Op {
    /// The op's name, as ggml prints it (`"MUL_MAT"`, `"UNARY(SILU)"` prints as `"SILU"`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Input => "INPUT",
            Op::Weight => "WEIGHT",
            Op::State => "STATE",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute { .. } => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Set { .. } => "SET",
            Op::SetRows => "SET_ROWS",
            Op::GetRows => "GET_ROWS",
            Op::Concat { .. } => "CONCAT",
            Op::Repeat => "REPEAT",
            Op::Pad { .. } => "PAD",
            Op::Diag => "DIAG",
            Op::Tri { .. } => "TRI",
            Op::Fill { .. } => "FILL",
            Op::MulMat => "MUL_MAT",
            Op::MulMatId => "MUL_MAT_ID",
            Op::SolveTri { .. } => "SOLVE_TRI",
            Op::Conv2d { .. } => "CONV_2D",
            Op::Im2Col { .. } => "IM2COL",
            Op::Binary(b) => match b {
                BinaryOp::Add => "ADD",
                BinaryOp::Sub => "SUB",
                BinaryOp::Mul => "MUL",
                BinaryOp::Div => "DIV",
            },
            Op::AddId => "ADD_ID",
            Op::Unary(u) => u.name(),
            Op::Clamp { .. } => "CLAMP",
            Op::Scale { .. } => "SCALE",
            Op::Glu { op, .. } => op.name(),
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::L2Norm { .. } => "L2_NORM",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::Rope(_) => "ROPE",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::Sum => "SUM",
            Op::SumRows => "SUM_ROWS",
            Op::CumSum => "CUMSUM",
            Op::ArgMax => "ARGMAX",
            Op::ArgSort { .. } => "ARGSORT",
            Op::TopK { .. } => "TOP_K",
            Op::Sample => "SAMPLE",
            Op::SsmConv => "SSM_CONV",
            Op::SsmScan => "SSM_SCAN",
            Op::GatedDeltaNet => "GATED_DELTA_NET",
            Op::Upscale { .. } => "UPSCALE",
        }
    }

    /// True for leaves (no sources, storage not computed by the graph).
    pub fn is_leaf(&self) -> bool {
        matches!(self, Op::Input | Op::Weight | Op::State)
    }

    /// True when the result shares the storage of `srcs[0]` (layout ops and in-place writes).
    pub fn aliases_src0(&self) -> bool {
        matches!(
            self,
            Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose | Op::Cpy | Op::SetRows
        )
    }

    /// True when the op only reinterprets its source's bytes (no kernel runs).
    pub fn is_layout_only(&self) -> bool {
        matches!(
            self,
            Op::View | Op::Reshape | Op::Permute { .. } | Op::Transpose
        )
    }
}

impl UnaryOp {
    /// ggml's name for the op.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Abs => "ABS",
            UnaryOp::Sgn => "SGN",
            UnaryOp::Neg => "NEG",
            UnaryOp::Step => "STEP",
            UnaryOp::Tanh => "TANH",
            UnaryOp::Elu => "ELU",
            UnaryOp::Relu => "RELU",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Gelu => "GELU",
            UnaryOp::GeluQuick => "GELU_QUICK",
            UnaryOp::GeluErf => "GELU_ERF",
            UnaryOp::Silu => "SILU",
            UnaryOp::Hardswish => "HARDSWISH",
            UnaryOp::Hardsigmoid => "HARDSIGMOID",
            UnaryOp::Exp => "EXP",
            UnaryOp::Expm1 => "EXPM1",
            UnaryOp::Softplus => "SOFTPLUS",
            UnaryOp::Floor => "FLOOR",
            UnaryOp::Ceil => "CEIL",
            UnaryOp::Round => "ROUND",
            UnaryOp::Trunc => "TRUNC",
            UnaryOp::Xielu { .. } => "XIELU",
            UnaryOp::Log => "LOG",
            UnaryOp::Sqr => "SQR",
            UnaryOp::Sqrt => "SQRT",
            UnaryOp::Sin => "SIN",
            UnaryOp::Cos => "COS",
        }
    }
}

impl GluOp {
    /// ggml's name for the op.
    pub fn name(&self) -> &'static str {
        match self {
            GluOp::Reglu => "REGLU",
            GluOp::Geglu => "GEGLU",
            GluOp::Swiglu => "SWIGLU",
            GluOp::SwigluOai { .. } => "SWIGLU_OAI",
            GluOp::GegluErf => "GEGLU_ERF",
            GluOp::GegluQuick => "GEGLU_QUICK",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SampleParams;

    fn params(r: f32, temperature: f32, top_p: f32, min_p: f32, top_k: u32) -> SampleParams {
        SampleParams {
            r,
            temperature,
            top_p,
            min_p,
            top_k,
        }
    }

    #[test]
    fn pick_cuts_and_draws_by_the_running_sums() {
        let pick = |v: &[f32], p: SampleParams| p.pick(v);
        // softmax ≈ [0.644, 0.237, 0.087, 0.032]
        let v = [3.0, 2.0, 1.0, 0.0];
        assert_eq!(pick(&v, params(0.99, 0.0, 1.0, 0.0, 0)), 0, "greedy");
        assert_eq!(pick(&v, params(0.0, 1.0, 1.0, 0.0, 0)), 0);
        assert_eq!(pick(&v, params(0.7, 1.0, 1.0, 0.0, 0)), 1);
        assert_eq!(pick(&v, params(0.9, 1.0, 1.0, 0.0, 0)), 2);
        assert_eq!(pick(&v, params(0.999, 1.0, 1.0, 0.0, 0)), 3);
        // top_k 2 renormalizes over two: 0.731 | 0.269.
        assert_eq!(pick(&v, params(0.72, 1.0, 1.0, 0.0, 2)), 0);
        assert_eq!(pick(&v, params(0.74, 1.0, 1.0, 0.0, 2)), 1);
        assert_eq!(pick(&v, params(0.999, 1.0, 1.0, 0.0, 2)), 1);
        // top_p 0.85: 0.644 + 0.237 = 0.881 reaches it at the second candidate, two kept.
        assert_eq!(pick(&v, params(0.999, 1.0, 0.85, 0.0, 0)), 1);
        assert_eq!(pick(&v, params(0.999, 1.0, 0.5, 0.0, 0)), 0);
        // min_p 0.1 keeps p >= 0.0644: three.
        assert_eq!(pick(&v, params(0.999, 1.0, 1.0, 0.1, 0)), 2);
        // Temperature 0.5 sharpens: softmax(2v) ≈ [0.865, 0.117, ...].
        assert_eq!(pick(&v, params(0.8, 0.5, 1.0, 0.0, 0)), 0);
        assert_eq!(pick(&v, params(0.8, 1.0, 1.0, 0.0, 0)), 1);
        // min_p 1 keeps the ties of the first.
        assert_eq!(pick(&[1.0, 1.0, 0.5], params(0.9, 1.0, 1.0, 1.0, 0)), 1);
    }

    /// A temperature so small that `logit / temperature` overflows still draws the most likely
    /// candidate (or its ties), never the last one through a NaN softmax.
    #[test]
    fn a_tiny_temperature_draws_the_first() {
        let v = [30.0, 29.0, -28.0];
        for t in [1e-38, 1e-30, f32::MIN_POSITIVE / 4.0] {
            assert_eq!(params(0.9, t, 1.0, 0.0, 0).pick(&v), 0, "temperature {t}");
        }
        assert_eq!(params(0.9, 1e-38, 1.0, 0.0, 0).pick(&[5.0, 5.0, 1.0]), 1);
    }

    /// A NaN temperature is greedy, as on the GPU, not a NaN softmax's last candidate.
    #[test]
    fn a_nan_temperature_draws_the_first() {
        let p = params(0.5, f32::NAN, 1.0, 0.0, 0);
        assert_eq!(p.pick(&[3.0, 2.0, 1.0]), 0);
    }
}
