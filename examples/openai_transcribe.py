#!/usr/bin/env python3
"""The official `openai` Python client's `audio.transcriptions.create`, unchanged, against `wgllm serve`.

    wgllm serve -m whisper-tiny.en --port 8080 &   # Whisper tiny.en, pulled and converted on first use
    python3 -m pip install openai
    python3 examples/openai_transcribe.py jfk.wav [--base-url http://127.0.0.1:8080/v1]

Transcribes the file as plain JSON, as verbose JSON (segments with times and tokens) and as SRT
subtitles, and prints them. With `--check FIXTURE` (a whisper.cpp reference fixture such as
`crates/speech/tests/fixtures/jfk.json`), the text and every segment's tokens and times must be
whisper.cpp's (times within 20 ms); the exit status says whether they were.
"""

import argparse
import json
import sys

from openai import OpenAI


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("audio", help="an audio file (WAV, FLAC, MP3, Ogg)")
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--check", metavar="FIXTURE", help="compare with a whisper.cpp fixture")
    args = ap.parse_args()
    # The server checks no key; the client insists on one.
    client = OpenAI(base_url=args.base_url, api_key="none")
    model = client.models.list().data[0].id

    with open(args.audio, "rb") as f:
        plain = client.audio.transcriptions.create(model=model, file=f)
    print(f"text: {plain.text!r}")
    with open(args.audio, "rb") as f:
        verbose = client.audio.transcriptions.create(
            model=model, file=f, response_format="verbose_json", timestamp_granularities=["segment"]
        )
    for s in verbose.segments:
        print(f"[{s.start:6.2f} --> {s.end:6.2f}] {s.text}")
    with open(args.audio, "rb") as f:
        srt = client.audio.transcriptions.create(model=model, file=f, response_format="srt")
    print(srt)

    if not args.check:
        return 0
    with open(args.check) as f:
        want = json.load(f)
    bad = []
    if plain.text.strip() != want["text"].strip():
        bad.append(f"text {plain.text!r}, whisper.cpp {want['text']!r}")
    if len(verbose.segments) != len(want["segments"]):
        bad.append(f"{len(verbose.segments)} segments, whisper.cpp {len(want['segments'])}")
    for i, (got, w) in enumerate(zip(verbose.segments, want["segments"])):
        if list(got.tokens) != w["tokens"]:
            bad.append(f"segment {i}: tokens {list(got.tokens)}, whisper.cpp {w['tokens']}")
        for end, mine, theirs in (("start", got.start, w["t0_ms"]), ("end", got.end, w["t1_ms"])):
            if abs(mine * 1000 - theirs) > 20:
                bad.append(f"segment {i}: {end} {mine} s, whisper.cpp {theirs} ms")
    if srt.count("-->") != len(want["segments"]):
        bad.append(f"the SRT has {srt.count('-->')} cues")
    for b in bad:
        print(f"FAIL {b}", file=sys.stderr)
    print("openai client check: " + ("ok" if not bad else f"{len(bad)} failures"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
