#!/usr/bin/env python3
"""Writes a GGUF holding only a model's tokenizer (every `tokenizer.*` key, no tensors), small
enough to carry to a GPU host for `wgllm synth --vocab-from`.
    python3 bench/vocab_gguf.py MODEL.gguf OUT.gguf
Needs the `gguf` package (pip install gguf==0.17.1)."""
import sys

import gguf


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(out, arch=str(r.fields["general.architecture"].contents()))
    kept = 0
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), kind)
        kept += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {kept} tokenizer keys from {src}")


if __name__ == "__main__":
    main()
