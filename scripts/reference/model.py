"""Reference forward pass for GGUF `llama` and `gemma3` models, in numpy.

Independent of the Rust engine: weights come from `gguf.GGUFReader` and are dequantized once with
`gguf.quants.dequantize` to float32; activations are float32, with float64 used for the reductions
that are cheap to do that way (RMSNorm sums, softmax, RoPE angles). The graph follows llama.cpp
(src/models/llama.cpp, src/models/gemma3.cpp and the hparams set up in src/llama-model.cpp), not
Hugging Face transformers: see README.md for where the two differ.

    m = Model("model.gguf")
    cache = m.new_cache()
    logits = m.forward([1, 2, 3], cache)     # (3, n_vocab) float32, appends to the cache
    logits = m.forward([4], cache)           # next position
"""
import math
import os

# OpenBLAS' threaded sgemm is much slower than one thread for these thin products on a small machine
# (and must be set before numpy loads BLAS); override by setting the variable yourself.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

ROPE_NORM, ROPE_NEOX = "norm", "neox"


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def rms_norm(x, w, eps):
    """ggml_rms_norm (sum in double) followed by the multiply by the stored weight."""
    x64 = x.astype(np.float64)
    scale = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return (x * scale.astype(np.float32)) * w


def mm(x, w):
    """x @ w.T for x (T, in) and a weight w (out, in) as GGUF stores it (ggml_mul_mat(w, x))."""
    return (w @ x.T).T


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    """ggml_gelu: the tanh approximation (what HF calls gelu_pytorch_tanh)."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


def rope(x, pos, n_rot, base, freq_scale, mode):
    """ggml_rope_ext without YaRN / ext factors. x: (T, H, D); pos: (T,) absolute positions.

    theta_i = pos * freq_scale * base^(-2i/n_rot), i = 0 .. n_rot/2 - 1.
    mode "norm": rotates adjacent pairs (x[2i], x[2i+1])            -- LLAMA_ROPE_TYPE_NORM
    mode "neox": rotates halves (x[i], x[i + n_rot/2])              -- LLAMA_ROPE_TYPE_NEOX
    Dimensions >= n_rot pass through unchanged.
    """
    half = n_rot // 2
    inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    theta = (np.asarray(pos, dtype=np.float64)[:, None] * freq_scale) * inv_freq[None, :]  # (T, half)
    cos = np.cos(theta).astype(np.float32)[:, None, :]
    sin = np.sin(theta).astype(np.float32)[:, None, :]
    out = x.copy()
    if mode == ROPE_NORM:
        x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    elif mode == ROPE_NEOX:
        x0, x1 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x0 * cos - x1 * sin
        out[..., half:n_rot] = x0 * sin + x1 * cos
    else:
        raise ValueError(mode)
    return out


class Cache:
    """Per-layer K/V for the positions seen so far: K[il], V[il] are (n_past, n_head_kv, head_dim)."""

    def __init__(self, n_layer):
        self.k = [None] * n_layer
        self.v = [None] * n_layer
        self.n_past = 0


class Model:
    def __init__(self, path, verbose=False):
        r = GGUFReader(path)
        self.reader = r
        self.path = path
        a = _field(r, "general.architecture")
        if a not in ("llama", "gemma3"):
            raise ValueError(f"unsupported architecture {a!r}")
        self.arch = a
        g = lambda k, d=None: _field(r, f"{a}.{k}", d)  # noqa: E731

        self.n_embd = int(g("embedding_length"))
        self.n_layer = int(g("block_count"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.head_dim = int(g("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(g("attention.value_length", self.head_dim))
        self.n_rot = int(g("rope.dimension_count", self.head_dim))
        self.n_ff = int(g("feed_forward_length"))
        self.n_ctx_train = int(g("context_length"))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(g("rope.freq_base", 10000.0))
        # rope.scaling.type linear -> freq_scale = 1/factor (llama.cpp); none here for our models.
        scaling = g("rope.scaling.type", "none")
        factor = float(g("rope.scaling.factor", 0.0) or 0.0)
        self.rope_freq_scale = 1.0 / factor if scaling == "linear" and factor > 0 else 1.0
        if scaling not in ("none", "linear"):
            raise NotImplementedError(f"rope scaling {scaling!r}")
        self.softcap = float(g("final_logit_softcapping", 0.0) or 0.0)
        self.attn_softcap = float(g("attn_logit_softcapping", 0.0) or 0.0)

        if a == "llama":
            self.rope_mode = ROPE_NORM  # the converter permuted Q/K rows so adjacent-pair rope is right
            self.attn_scale = 1.0 / math.sqrt(self.head_dim)
            self.swa_layers = [False] * self.n_layer
            self.n_swa = 0
            self.act = silu
        else:  # gemma3
            self.rope_mode = ROPE_NEOX
            # llama.cpp: 27B uses 1/sqrt(n_embd/n_head) (query_pre_attn_scalar), others 1/sqrt(head_dim).
            qpas = g("attention.query_pre_attn_scalar")  # not written by llama.cpp's converter; honour if present
            if qpas is not None:
                self.attn_scale = 1.0 / math.sqrt(float(qpas))
            elif self.n_layer == 62:  # LLM_TYPE_27B
                self.attn_scale = 1.0 / math.sqrt(self.n_embd / self.n_head)
            else:
                self.attn_scale = 1.0 / math.sqrt(self.head_dim)
            self.n_swa = int(g("attention.sliding_window", 0) or 0)
            # hparams.set_swa_pattern(6): layer il is SWA iff il % 6 < 5 (every 6th layer is global)
            self.swa_layers = [self.n_swa > 0 and (il % 6 < 5) for il in range(self.n_layer)]
            self.act = gelu_tanh
        # rope base/scale per layer: SWA layers of gemma3 use 10000 and scale 1 (rope_freq_base_train_swa)
        self.layer_rope = [
            (10000.0, 1.0) if self.swa_layers[il] else (self.rope_base, self.rope_freq_scale)
            for il in range(self.n_layer)
        ]

        # ---- weights: dequantized once to float32, shape (out, in) i.e. GGUF [ne0=in, ne1=out] ----
        self.types = {}
        W = {}
        for t in r.tensors:
            W[t.name] = np.ascontiguousarray(dequantize(t.data, t.tensor_type).astype(np.float32, copy=False))
            self.types[t.name] = t.tensor_type.name
        self.tok_embd = W.pop("token_embd.weight")  # (n_vocab, n_embd)
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = W.pop("output_norm.weight")
        self.tied_output = "output.weight" not in W
        self.output = self.tok_embd if self.tied_output else W.pop("output.weight")
        self.layers = []
        for il in range(self.n_layer):
            p = f"blk.{il}."
            L = {k[len(p):].removesuffix(".weight"): W.pop(k) for k in list(W) if k.startswith(p)}
            self.layers.append(L)
        if any(k.endswith(".bias") for L in self.layers for k in L) or W:
            raise NotImplementedError(f"unexpected tensors: {sorted(W)[:5]}")
        if verbose:
            print(self.describe())

    def describe(self):
        return {
            "arch": self.arch, "n_vocab": self.n_vocab, "n_embd": self.n_embd, "n_layer": self.n_layer,
            "n_head": self.n_head, "n_head_kv": self.n_head_kv, "head_dim": self.head_dim,
            "n_rot": self.n_rot, "n_ff": self.n_ff, "n_ctx_train": self.n_ctx_train, "rms_eps": self.eps,
            "rope_base": self.rope_base, "rope_freq_scale": self.rope_freq_scale, "rope_mode": self.rope_mode,
            "attn_scale": self.attn_scale, "final_logit_softcapping": self.softcap,
            "n_swa": self.n_swa, "swa_layers": [il for il, s in enumerate(self.swa_layers) if s],
            "layer_rope_base": sorted({b for b, _ in self.layer_rope}), "tied_output": self.tied_output,
        }

    def new_cache(self):
        return Cache(self.n_layer)

    # ------------------------------------------------------------------------------------------
    def _attention(self, il, q, k, v, pos, cache):
        """q: (T, H, D) k, v: (T, Hkv, D) for the new tokens; appends k/v to the cache."""
        cache.k[il] = k if cache.k[il] is None else np.concatenate([cache.k[il], k], axis=0)
        cache.v[il] = v if cache.v[il] is None else np.concatenate([cache.v[il], v], axis=0)
        K, V = cache.k[il], cache.v[il]  # (S, Hkv, D)
        S = K.shape[0]
        kpos = np.arange(S)
        # causal (+ sliding window: llama.cpp masks key p0 for query p1 when p1 - p0 >= n_swa)
        masked = kpos[None, :] > pos[:, None]
        if self.swa_layers[il]:
            masked |= (pos[:, None] - kpos[None, :]) >= self.n_swa
        group = self.n_head // self.n_head_kv
        out = np.empty((q.shape[0], self.n_head, V.shape[-1]), dtype=np.float32)
        for h in range(self.n_head):
            hk = h // group  # GQA: query head h reads kv head h // (n_head / n_head_kv)
            s = (q[:, h, :] @ K[:, hk, :].T).astype(np.float64) * self.attn_scale  # (T, S)
            if self.attn_softcap:
                s = self.attn_softcap * np.tanh(s / self.attn_softcap)
            s[masked] = -np.inf
            s -= s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            out[:, h, :] = p.astype(np.float32) @ V[:, hk, :]
        return out.reshape(q.shape[0], -1)

    def forward(self, ids, cache, logits_for=None):
        """Run `ids` at positions cache.n_past ... ; returns logits (len(rows), n_vocab) float32.

        logits_for: indices (into ids) of the rows whose logits are wanted; default all.
        """
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(cache.n_past, cache.n_past + T)
        x = self.tok_embd[ids].astype(np.float32)
        if self.arch == "gemma3":
            x = x * np.float32(math.sqrt(self.n_embd))  # llama.cpp: ggml_scale(inpL, sqrtf(n_embd))
        H, Hkv, D = self.n_head, self.n_head_kv, self.head_dim
        for il, L in enumerate(self.layers):
            base, fscale = self.layer_rope[il]
            h = rms_norm(x, L["attn_norm"], self.eps)
            q = (mm(h, L["attn_q"])).reshape(T, H, D)
            k = (mm(h, L["attn_k"])).reshape(T, Hkv, D)
            v = (mm(h, L["attn_v"])).reshape(T, Hkv, self.head_dim_v)
            if "attn_q_norm" in L:  # gemma3 QK-norm: RMSNorm over head_dim, before rope
                q = rms_norm(q, L["attn_q_norm"], self.eps)
                k = rms_norm(k, L["attn_k_norm"], self.eps)
            q = rope(q, pos, self.n_rot, base, fscale, self.rope_mode)
            k = rope(k, pos, self.n_rot, base, fscale, self.rope_mode)
            a = mm(self._attention(il, q, k, v, pos, cache), L["attn_output"])
            if "post_attention_norm" in L:
                a = rms_norm(a, L["post_attention_norm"], self.eps)
            x = x + a
            h = rms_norm(x, L["ffn_norm"], self.eps)
            f = mm(self.act(mm(h, L["ffn_gate"])) * mm(h, L["ffn_up"]), L["ffn_down"])
            if "post_ffw_norm" in L:
                f = rms_norm(f, L["post_ffw_norm"], self.eps)
            x = x + f
        cache.n_past += T
        if logits_for is not None:
            x = x[np.asarray(logits_for)]
        x = rms_norm(x, self.output_norm, self.eps)
        logits = mm(x, self.output)
        if self.softcap:
            logits = (self.softcap * np.tanh(logits.astype(np.float64) / self.softcap)).astype(np.float32)
        return logits
