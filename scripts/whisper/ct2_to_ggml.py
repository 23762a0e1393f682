#!/usr/bin/env python3
"""Convert a CTranslate2 Whisper checkpoint to whisper.cpp's legacy ggml format.

Reads a CTranslate2 Whisper model directory (model.bin, vocabulary.txt,
config.json is not needed) and writes a `ggml-*.bin` file laid out exactly
as whisper.cpp's models/convert-pt-to-ggml.py writes it (ftype 1):

  magic 0x67676d6c, 11 x i32 hparams (n_vocab, n_audio_ctx, n_audio_state,
  n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head,
  n_text_layer, n_mels, ftype), mel filters (i32 n_mel, i32 n_fft, f32 data,
  librosa slaney filters as in whisper's mel_filters.npz), the regular
  vocabulary (i32 count, then i32 len + raw bytes per token; the special
  tokens from <|endoftext|> on are not written, whisper.cpp synthesises them),
  then the tensors (i32 n_dims, i32 name_len, i32 ttype, dims in ggml order,
  name, data). 2-D+ weights are f16, 1-D tensors, conv biases (reshaped to
  [n, 1]) and positional embeddings are f32.

CTranslate2 fuses the self-attention q/k/v projections (and the
cross-attention k/v projections); they are split here, and the key bias,
which Whisper does not have (CTranslate2 stores zeros), is dropped.

Usage: python3 ct2_to_ggml.py CT2_MODEL_DIR OUTPUT.bin

Dependencies: python3, numpy.
"""

import re
import struct
import sys
from pathlib import Path

import numpy as np

CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path):
    """Parse a CTranslate2 model.bin into ({name: ndarray}, {alias: target})."""
    data = Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    def string():
        nonlocal pos
        (n,) = take("H")
        s = data[pos:pos + n].rstrip(b"\0").decode()
        pos += n
        return s

    (version,) = take("I")
    if version != 6:
        sys.exit(f"unsupported CTranslate2 binary version {version}")
    spec = string()
    if spec != "WhisperSpec":
        sys.exit(f"not a Whisper model: spec {spec!r}")
    take("I")  # spec revision
    (n_vars,) = take("I")
    variables = {}
    for _ in range(n_vars):
        name = string()
        (rank,) = take("B")
        dims = take("I" * rank)
        dtype, nbytes = take("BI")
        if dtype not in CT2_DTYPES:
            sys.exit(f"{name}: unsupported dtype {dtype}")
        arr = np.frombuffer(data, CT2_DTYPES[dtype], nbytes // np.dtype(CT2_DTYPES[dtype]).itemsize, pos)
        variables[name] = arr.reshape(dims)
        pos += nbytes
    (n_aliases,) = take("I")
    aliases = dict((string(), string()) for _ in range(n_aliases))
    if pos != len(data):
        sys.exit(f"trailing bytes in {path}: {len(data) - pos}")
    return variables, aliases


def mel_filters(sr=16000, n_fft=400, n_mels=80):
    """librosa.filters.mel(sr, n_fft, n_mels, htk=False, norm='slaney'), float32."""
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        return min_log_mel + np.log(f / min_log_hz) / logstep if f >= min_log_hz else f / f_sp

    def mel_to_hz(m):
        hz = f_sp * m
        log_t = m >= min_log_mel
        hz[log_t] = min_log_hz * np.exp(logstep * (m[log_t] - min_log_mel))
        return hz

    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2.0), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, np.newaxis]
    return weights


def gpt2_byte_decoder():
    """Inverse of GPT-2's bytes_to_unicode() table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def regular_tokens(vocab_path):
    """Raw bytes of the tokens before <|endoftext|>, as tiktoken's gpt2/multilingual ranks."""
    lines = Path(vocab_path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    n_regular = lines.index("<|endoftext|>")
    dec = gpt2_byte_decoder()
    return len(lines), [bytes(dec[c] for c in tok) for tok in lines[:n_regular]]


def convert_tensors(v):
    """Map CT2 variables to whisper.cpp tensors, in OpenAI state_dict order."""
    used = set()

    def get(name):
        used.add(name)
        return v[name]

    def split(name, parts):
        w = get(name)
        return np.split(w, parts, axis=0)

    out = []
    def n_layers(side):
        return len({k.split("/")[1] for k in v if re.match(rf"{side}/layer_\d+/", k)})

    n_enc, n_dec = n_layers("encoder"), n_layers("decoder")

    def attention(prefix, ct2, fused_qkv):
        if fused_qkv:
            q_w, k_w, v_w = split(f"{ct2}/linear_0/weight", 3)
            q_b, k_b, v_b = split(f"{ct2}/linear_0/bias", 3)
            o = f"{ct2}/linear_1"
        else:  # cross attention: linear_0 = query, linear_1 = fused key/value
            q_w, q_b = get(f"{ct2}/linear_0/weight"), get(f"{ct2}/linear_0/bias")
            k_w, v_w = split(f"{ct2}/linear_1/weight", 2)
            k_b, v_b = split(f"{ct2}/linear_1/bias", 2)
            o = f"{ct2}/linear_2"
        if np.any(k_b != 0):
            sys.exit(f"{ct2}: non-zero key bias, Whisper has none")
        return [
            (f"{prefix}.query.weight", q_w), (f"{prefix}.query.bias", q_b),
            (f"{prefix}.key.weight", k_w),
            (f"{prefix}.value.weight", v_w), (f"{prefix}.value.bias", v_b),
            (f"{prefix}.out.weight", get(f"{o}/weight")), (f"{prefix}.out.bias", get(f"{o}/bias")),
        ]

    def norm(name, ct2):
        return [(f"{name}.weight", get(f"{ct2}/gamma")), (f"{name}.bias", get(f"{ct2}/beta"))]

    def mlp(prefix, ct2):
        return [
            (f"{prefix}.mlp.0.weight", get(f"{ct2}/linear_0/weight")), (f"{prefix}.mlp.0.bias", get(f"{ct2}/linear_0/bias")),
            (f"{prefix}.mlp.2.weight", get(f"{ct2}/linear_1/weight")), (f"{prefix}.mlp.2.bias", get(f"{ct2}/linear_1/bias")),
        ] + norm(f"{prefix}.mlp_ln", f"{ct2}/layer_norm")

    out.append(("encoder.positional_embedding", get("encoder/position_encodings/encodings")))
    for c in ("conv1", "conv2"):
        out += [(f"encoder.{c}.weight", get(f"encoder/{c}/weight")),
                (f"encoder.{c}.bias", get(f"encoder/{c}/bias").reshape(-1, 1))]
    for i in range(n_enc):
        p, c = f"encoder.blocks.{i}", f"encoder/layer_{i}"
        out += attention(f"{p}.attn", f"{c}/self_attention", True)
        out += norm(f"{p}.attn_ln", f"{c}/self_attention/layer_norm")
        out += mlp(p, f"{c}/ffn")
    out += norm("encoder.ln_post", "encoder/layer_norm")

    out.append(("decoder.positional_embedding", get("decoder/position_encodings/encodings")))
    out.append(("decoder.token_embedding.weight", get("decoder/embeddings/weight")))
    for i in range(n_dec):
        p, c = f"decoder.blocks.{i}", f"decoder/layer_{i}"
        out += attention(f"{p}.attn", f"{c}/self_attention", True)
        out += norm(f"{p}.attn_ln", f"{c}/self_attention/layer_norm")
        out += attention(f"{p}.cross_attn", f"{c}/attention", False)
        out += norm(f"{p}.cross_attn_ln", f"{c}/attention/layer_norm")
        out += mlp(p, f"{c}/ffn")
    out += norm("decoder.ln", "decoder/layer_norm")

    # Config scalars: check they describe plain OpenAI Whisper, then mark them used.
    expect = {"decoder/pre_norm": 1, "decoder/scale_embeddings": 0, "decoder/alibi": 0,
              "decoder/start_from_zero_embedding": 0, "decoder/activation": 3}  # 3 = GELU (erf)
    for k, want in expect.items():
        if k in v and int(get(k)) != want:
            sys.exit(f"{k} = {int(v[k])}, expected {want}: not a standard Whisper model")
    for k in ("encoder/num_heads", "decoder/num_heads", "decoder/alignment_heads", "decoder/alignment_layer"):
        if k in v:
            get(k)
    left = sorted(set(v) - used)
    if left:
        sys.exit(f"unmapped CTranslate2 variables: {left}")
    return out, n_enc, n_dec


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ct2_to_ggml.py CT2_MODEL_DIR OUTPUT.bin")
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    v, aliases = read_ct2(src / "model.bin")
    if aliases not in ({}, {"decoder/projection/weight": "decoder/embeddings/weight"}):
        sys.exit(f"unexpected aliases {aliases}: output projection must be tied to the embeddings")
    tensors, n_enc, n_dec = convert_tensors(v)

    n_vocab, state = v["decoder/embeddings/weight"].shape
    n_mels = v["encoder/conv1/weight"].shape[1]
    n_vocab_file, tokens = regular_tokens(src / "vocabulary.txt")
    if n_vocab_file != n_vocab:
        sys.exit(f"vocabulary.txt has {n_vocab_file} entries, embeddings {n_vocab}")
    hparams = [
        n_vocab, v["encoder/position_encodings/encodings"].shape[0], state, int(v["encoder/num_heads"]), n_enc,
        v["decoder/position_encodings/encodings"].shape[0], state, int(v["decoder/num_heads"]), n_dec,
        n_mels, 1,  # ftype 1: f16 weights
    ]
    filters = mel_filters(n_mels=n_mels)
    f32_names = {"encoder.conv1.bias", "encoder.conv2.bias",
                 "encoder.positional_embedding", "decoder.positional_embedding"}

    with open(dst, "wb") as f:
        f.write(struct.pack("<12i", 0x67676D6C, *hparams))
        f.write(struct.pack("<2i", *filters.shape))
        f.write(filters.astype("<f4").tobytes())
        f.write(struct.pack("<i", len(tokens)))
        for t in tokens:
            f.write(struct.pack("<i", len(t)) + t)
        for name, data in tensors:
            f32 = data.ndim < 2 or name in f32_names
            data = np.ascontiguousarray(data, dtype="<f4" if f32 else "<f2")
            raw = name.encode()
            f.write(struct.pack("<3i", data.ndim, len(raw), 0 if f32 else 1))
            f.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))
            f.write(raw)
            f.write(data.tobytes())
    print(f"hparams {hparams}; {len(tokens)} regular tokens; {len(tensors)} tensors; wrote {dst}")


if __name__ == "__main__":
    main()
