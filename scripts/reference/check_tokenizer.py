#!/usr/bin/env python3
"""Cross-check the transformers tokenization of the fixture texts against a direct port of
llama.cpp's SentencePiece-BPE algorithm (llm_tokenizer_spm: merge the adjacent pair with the highest
vocabulary score, leftmost first; byte fallback), for `tokenizer.ggml.model == "llama"` files (Gemma).

    python3 scripts/reference/check_tokenizer.py [GGUF]
"""
import heapq
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_fixtures as G  # noqa: E402
from tok import GGUFTokenizer, field  # noqa: E402
from gguf import GGUFReader  # noqa: E402


class LlamaCppSpm:
    def __init__(self, reader):
        self.tokens = field(reader, "tokenizer.ggml.tokens")
        self.scores = field(reader, "tokenizer.ggml.scores")
        types = field(reader, "tokenizer.ggml.token_type")
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.add_space_prefix = bool(field(reader, "tokenizer.ggml.add_space_prefix", True))
        # control (3) and user-defined (4) tokens are matched whole in the text (parse_special)
        special = sorted((t for t, ty in zip(self.tokens, types) if ty in (3, 4) and t), key=len, reverse=True)
        self.special_re = re.compile("(" + "|".join(re.escape(s) for s in special) + ")")

    def _segment(self, text):
        text = text.replace(" ", "\u2581")
        sym = list(text)  # one symbol per code point
        prev = list(range(-1, len(sym) - 1))
        nxt = list(range(1, len(sym) + 1))
        heap = []

        def push(left, right):
            if left < 0 or right >= len(sym):
                return
            s = sym[left] + sym[right]
            tid = self.ids.get(s)
            if tid is not None:
                heapq.heappush(heap, (-self.scores[tid], left, s, right))

        for i in range(1, len(sym)):
            push(i - 1, i)
        while heap:
            _, left, s, right = heapq.heappop(heap)
            if not sym[left] or not sym[right] or sym[left] + sym[right] != s or nxt[left] != right:
                continue  # stale
            sym[left], sym[right] = s, ""
            nxt[left] = nxt[right]
            if nxt[right] < len(sym):
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        out = []
        i = 0
        while i < len(sym):
            s = sym[i]
            if s in self.ids:
                out.append(self.ids[s])
            else:  # byte fallback (the rev_merge path never triggers for single merged symbols found here)
                out.extend(self.ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
            i = nxt[i]
        return out

    def encode(self, text):
        ids = []
        for k, part in enumerate(self.special_re.split(text)):
            if not part:
                continue
            if k % 2:
                ids.append(self.ids[part])
            else:
                ids.extend(self._segment(part))
        return ids


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else G.MODELS["gemma3"]
    r = GGUFReader(path)
    if field(r, "tokenizer.ggml.model") != "llama":
        sys.exit("only for sentencepiece ('llama') vocabularies")
    if field(r, "tokenizer.ggml.add_space_prefix", True):
        sys.exit("add_space_prefix=True not handled here")
    spm = LlamaCppSpm(r)
    tpl = None if "tokenizer.chat_template" in r.fields else G.GEMMA3_CHAT_TEMPLATE
    T = GGUFTokenizer(path, reader=r, chat_template=tpl)
    texts = [(G.FIXTURES / "ppl.txt").read_text(encoding="utf-8")]
    for p in G.PROMPTS:
        texts.append(T.render_chat(p["messages"]) if p["kind"] == "chat" else p["text"])
    bad = 0
    for t in texts:
        a = T.encode(t, add_bos=False)
        b = spm.encode(t)
        same = a == b
        bad += not same
        print(f"{'OK  ' if same else 'DIFF'} {len(a):5d} vs {len(b):5d} tokens  {t[:40]!r}")
        if not same:
            i = next(i for i, (x, y) in enumerate(zip(a + [-1], b + [-1])) if x != y)
            print("   first difference at", i, T.tok.convert_ids_to_tokens(a[i:i + 5]),
                  T.tok.convert_ids_to_tokens(b[i:i + 5]))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
