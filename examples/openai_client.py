#!/usr/bin/env python3
"""The official `openai` Python client, unchanged, against `wgllm serve`.

    wgllm serve --port 8080 &               # default model (SmolLM2), pulled on first use
    python3 -m pip install openai
    python3 examples/openai_client.py [--base-url http://127.0.0.1:8080/v1] [--max-tokens 32]

Lists the served model, asks one question without and with streaming, completes a raw prompt,
and asks for log-probabilities; checks that the streamed answer equals the plain one (greedy).
"""

import argparse

from openai import OpenAI


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    # The server checks no key; the client insists on one.
    client = OpenAI(base_url=args.base_url, api_key="none")

    model = client.models.list().data[0].id
    print(f"model: {model}")

    question = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(
        model=model, messages=question, max_tokens=args.max_tokens, temperature=0
    )
    answer = r.choices[0].message.content
    print(f"chat: {answer!r} (finish_reason {r.choices[0].finish_reason}, usage {r.usage})")

    streamed = []
    stream = client.chat.completions.create(
        model=model,
        messages=question,
        max_tokens=args.max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    print("chat, streamed: ", end="", flush=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            streamed.append(chunk.choices[0].delta.content)
            print(chunk.choices[0].delta.content, end="", flush=True)
        if chunk.usage:
            print(f"\n  usage {chunk.usage}")
    assert "".join(streamed) == answer, "greedy: the stream must equal the plain answer"

    c = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=args.max_tokens, temperature=0.7, seed=1
    )
    print(f"completion: {c.choices[0].text!r}")

    lp = client.chat.completions.create(
        model=model,
        messages=question,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    for t in lp.choices[0].logprobs.content:
        alts = ", ".join(f"{a.token!r} {a.logprob:.2f}" for a in t.top_logprobs)
        print(f"  {t.token!r}: {t.logprob:.3f}  (top: {alts})")


if __name__ == "__main__":
    main()
