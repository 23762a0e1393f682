"""Tokenizer from a GGUF file via transformers' GGUF->fast-tokenizer conversion, without torch.

transformers' own `AutoTokenizer.from_pretrained(dir, gguf_file=...)` reads the metadata through a
module that imports torch, so we read the metadata with `gguf.GGUFReader` and feed the same dict to
`transformers.integrations.gguf.convert_gguf_tokenizer`.
"""
from gguf import GGUFReader
from transformers import PreTrainedTokenizerFast
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class GGUFTokenizer:
    """Thin wrapper: llama.cpp-style BOS handling on top of a transformers fast tokenizer."""

    def __init__(self, path, reader=None, chat_template=None):
        r = reader if reader is not None else GGUFReader(path)
        arch = field(r, "general.architecture")
        tdict, tconf = {}, {}
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
            if f"tokenizer.{key}" in r.fields:
                tdict[name] = field(r, f"tokenizer.{key}")
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer_config"].items():
            if f"tokenizer.{key}" in r.fields:
                tconf[name] = field(r, f"tokenizer.{key}")
        fast, _ = convert_gguf_tokenizer(arch, tdict)
        toks = tdict["tokens"]
        self.bos_id = field(r, "tokenizer.ggml.bos_token_id")
        self.eos_id = field(r, "tokenizer.ggml.eos_token_id")
        self.eot_id = None
        # llama.cpp: tokenizer.ggml.add_bos_token; an spm ("llama") vocabulary defaults to True
        default_bos = tdict.get("tokenizer_type") == "llama"
        self.add_bos = bool(field(r, "tokenizer.ggml.add_bos_token", default_bos))
        self.chat_template = chat_template or tconf.get("chat_template")
        self.chat_template_source = "gguf" if tconf.get("chat_template") and not chat_template else "builtin"
        self.tok = PreTrainedTokenizerFast(
            tokenizer_object=fast,
            bos_token=toks[self.bos_id] if self.bos_id is not None else None,
            eos_token=toks[self.eos_id] if self.eos_id is not None else None,
            chat_template=self.chat_template,
        )
        self.bos_token = toks[self.bos_id] if self.bos_id is not None else None
        self.n_vocab = len(toks)

    def encode(self, text, add_bos=None):
        """Like llama.cpp's common_tokenize(text, add_special, parse_special=True)."""
        ids = self.tok(text, add_special_tokens=False).input_ids
        if (self.add_bos if add_bos is None else add_bos):
            ids = [self.bos_id] + ids
        return ids

    def render_chat(self, messages):
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # llama.cpp strips a leading BOS from the rendered template when it adds BOS itself,
        # so the prompt starts with exactly one BOS.
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
        return text

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)
