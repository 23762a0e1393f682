"""Reference forward pass for a Hugging Face BERT encoder (e.g. all-MiniLM-L6-v2), in numpy.

Independent of the Rust engine: weights come from `model.safetensors` (read with
`safetensors.numpy`) and are converted once from float32 to float64; every activation is float64.
The graph is transformers' `BertModel` (post-LayerNorm, absolute positions), followed by
sentence-transformers' pooling (`1_Pooling/config.json`) and optional L2 normalisation.

    m = Bert("/tmp/minilm/hf")
    e = m.embed([[101, 7592, 102], [101, 102]])                 # (2, hidden) mean pooled
    e = m.embed([[101, 7592, 102]], normalize=True)             # unit length
    h, mask = m.encode([[101, 7592, 102]])                      # (B, T, hidden) last hidden state
"""
import json
import math
import os

# Same reason as model.py: one BLAS thread is faster for these thin products on a small machine.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

try:  # scipy is optional; the fallback is math.erf element by element (exact to double precision)
    from scipy.special import erf as _erf  # noqa: E402
except ImportError:  # pragma: no cover - depends on the environment
    _erf = np.vectorize(math.erf, otypes=[np.float64])


def layer_norm(x, w, b, eps):
    """(x - mean) / sqrt(var + eps) * w + b over the last axis; var is the biased (population) one."""
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d / np.sqrt(var + eps) * w + b


def linear(x, w, b):
    """x @ w.T + b for a weight in HF Linear layout w (out, in)."""
    return x @ w.T + b


def gelu(x):
    """Exact GELU, 0.5 x (1 + erf(x / sqrt 2)): HF hidden_act "gelu"."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """tanh approximation: HF "gelu_new" / "gelu_pytorch_tanh"."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


ACTS = {"gelu": gelu, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh}


def read_pooling(model_dir):
    """Pooling mode from sentence-transformers' 1_Pooling/config.json ("mean" when absent)."""
    p = os.path.join(model_dir, "1_Pooling", "config.json")
    if not os.path.exists(p):
        return "mean"
    c = json.load(open(p))
    modes = [m for m, k in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                            ("max", "pooling_mode_max_tokens"),
                            ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens")) if c.get(k)]
    if len(modes) != 1 or modes[0] not in ("mean", "cls"):
        raise NotImplementedError(f"pooling {modes} (only a single mean or cls mode is supported)")
    return modes[0]


def pool(h, mask, mode):
    """Sentence embedding from the last hidden state h (B, T, H) and mask (B, T) of 1 = real token.

    mean: sum of the real tokens' vectors / their count (sentence-transformers, count clamped to 1e-9);
    cls: the first token's vector.
    """
    if mode == "cls":
        return h[:, 0, :]
    if mode == "mean":
        m = mask.astype(np.float64)[:, :, None]
        return (h * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    raise NotImplementedError(mode)


def l2_normalize(x, eps=1e-12):
    """x / max(||x||_2, eps) per row (torch.nn.functional.normalize, as sentence-transformers' Normalize)."""
    n = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    return x / np.maximum(n, eps)


class Bert:
    def __init__(self, model_dir):
        self.dir = model_dir
        c = json.load(open(os.path.join(model_dir, "config.json")))
        self.config = c
        self.n_embd = int(c["hidden_size"])
        self.n_layer = int(c["num_hidden_layers"])
        self.n_head = int(c["num_attention_heads"])
        self.head_dim = self.n_embd // self.n_head
        self.n_ff = int(c["intermediate_size"])
        self.eps = float(c.get("layer_norm_eps", 1e-12))
        self.n_ctx = int(c.get("max_position_embeddings", 512))
        self.pad_id = int(c.get("pad_token_id", 0) or 0)
        self.act_name = c.get("hidden_act", "gelu")
        if self.act_name not in ACTS:
            raise NotImplementedError(f"hidden_act {self.act_name!r}")
        self.act = ACTS[self.act_name]
        pet = c.get("position_embedding_type", "absolute")
        if pet != "absolute":
            raise NotImplementedError(f"position_embedding_type {pet!r}")
        self.pooling = read_pooling(model_dir)

        raw = load_file(os.path.join(model_dir, "model.safetensors"))
        # Names are "embeddings..." (BertModel) or "bert.embeddings..." (BertFor* heads): strip the prefix.
        W = {(k[len("bert."):] if k.startswith("bert.") else k): v for k, v in raw.items()}
        self.dtypes = sorted({str(v.dtype) for k, v in W.items() if k != "embeddings.position_ids"})
        f = lambda k: W.pop(k).astype(np.float64)  # noqa: E731
        self.word = f("embeddings.word_embeddings.weight")  # (n_vocab, n_embd)
        self.pos = f("embeddings.position_embeddings.weight")  # (n_ctx, n_embd)
        self.tt = f("embeddings.token_type_embeddings.weight")  # (type_vocab, n_embd)
        self.emb_ln = (f("embeddings.LayerNorm.weight"), f("embeddings.LayerNorm.bias"))
        self.n_vocab = self.word.shape[0]
        self.layers = []
        for il in range(self.n_layer):
            p = f"encoder.layer.{il}."
            g = lambda s: f(p + s)  # noqa: E731
            self.layers.append({
                "q": (g("attention.self.query.weight"), g("attention.self.query.bias")),
                "k": (g("attention.self.key.weight"), g("attention.self.key.bias")),
                "v": (g("attention.self.value.weight"), g("attention.self.value.bias")),
                "o": (g("attention.output.dense.weight"), g("attention.output.dense.bias")),
                "ln1": (g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias")),
                "up": (g("intermediate.dense.weight"), g("intermediate.dense.bias")),
                "down": (g("output.dense.weight"), g("output.dense.bias")),
                "ln2": (g("output.LayerNorm.weight"), g("output.LayerNorm.bias")),
            })
        # Not used for sentence embeddings: the position_ids buffer, the pooler (tanh dense on [CLS]),
        # and any task head. Anything else is unexpected.
        left = [k for k in W if k != "embeddings.position_ids" and not k.startswith("pooler.")
                and not k.startswith(("cls.", "classifier.", "qa_outputs."))]
        if left:
            raise NotImplementedError(f"unexpected tensors: {sorted(left)[:5]}")

    def describe(self):
        return {
            "arch": "bert", "n_vocab": self.n_vocab, "n_embd": self.n_embd, "n_layer": self.n_layer,
            "n_head": self.n_head, "head_dim": self.head_dim, "n_ff": self.n_ff, "n_ctx_train": self.n_ctx,
            "layer_norm_eps": self.eps, "hidden_act": self.act_name, "pooling": self.pooling,
            "attn_scale": 1.0 / math.sqrt(self.head_dim), "weight_dtypes": self.dtypes,
        }

    def encode(self, ids_list, token_type_ids=None, collect=None):
        """Last hidden state for a batch of token-id lists of any lengths.

        The batch is right-padded with pad_token_id to the longest length; padded positions are
        masked out as attention keys (score -inf) so they change nothing for the real tokens.
        collect: optional list; the hidden state after the embedding LayerNorm and after each layer
        is appended to it (B, T, n_embd each).
        Returns (h (B, T, n_embd) float64, mask (B, T) int: 1 = real token).
        """
        B = len(ids_list)
        T = max(len(x) for x in ids_list)
        if T > self.n_ctx:
            raise ValueError(f"sequence of {T} tokens > max_position_embeddings {self.n_ctx}")
        ids = np.full((B, T), self.pad_id, dtype=np.int64)
        tt = np.zeros((B, T), dtype=np.int64)
        mask = np.zeros((B, T), dtype=np.int64)
        for b, x in enumerate(ids_list):
            ids[b, :len(x)] = x
            mask[b, :len(x)] = 1
            if token_type_ids is not None:
                tt[b, :len(x)] = token_type_ids[b]

        # embeddings: word + absolute position (0..T-1) + token type, then LayerNorm
        x = self.word[ids] + self.pos[np.arange(T)][None, :, :] + self.tt[tt]
        x = layer_norm(x, *self.emb_ln, self.eps)
        if collect is not None:
            collect.append(x)

        H, D = self.n_head, self.head_dim
        scale = 1.0 / math.sqrt(D)
        key_bias = np.where(mask[:, None, None, :] == 1, 0.0, -np.inf)  # (B, 1, 1, T) over keys
        split = lambda t: t.reshape(B, T, H, D).transpose(0, 2, 1, 3)  # noqa: E731  (B, H, T, D)
        for L in self.layers:
            q = split(linear(x, *L["q"]))
            k = split(linear(x, *L["k"]))
            v = split(linear(x, *L["v"]))
            s = (q @ k.transpose(0, 1, 3, 2)) * scale + key_bias  # (B, H, Tq, Tk)
            s -= s.max(axis=-1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=-1, keepdims=True)
            a = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, H * D)
            x = layer_norm(x + linear(a, *L["o"]), *L["ln1"], self.eps)  # post-LN residual
            f = linear(self.act(linear(x, *L["up"])), *L["down"])
            x = layer_norm(x + f, *L["ln2"], self.eps)
            if collect is not None:
                collect.append(x)
        return x, mask

    def embed(self, ids_list, token_type_ids=None, normalize=False, pooling=None):
        """Sentence embeddings (B, n_embd) float64: encode, pool (the model's mode unless given), and
        L2-normalise if asked (sentence-transformers' Normalize module)."""
        h, mask = self.encode(ids_list, token_type_ids)
        e = pool(h, mask, pooling or self.pooling)
        return l2_normalize(e) if normalize else e
