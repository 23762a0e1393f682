#!/usr/bin/env python3
"""The official `openai` Python client's structured output and tool calling against `wgllm serve`.

    wgllm serve --port 8080 &                # SmolLM2-135M-Instruct, the default model
    python3 -m pip install openai jsonschema
    python3 examples/openai_structured.py [--base-url http://127.0.0.1:8080/v1]

Asks for JSON under a schema (`response_format` json_schema, strict) for twenty cities at once,
then calls a tool: `tool_choice="required"` gets a `get_weather` call in `message.tool_calls`,
the same request streamed gets the same call as deltas, and a second turn carrying the tool's
answer (a message of role `tool`) gets a reply in words. With `--check`, every JSON reply must
parse and validate against the schema, the call's arguments must validate against the tool's
parameters, the streamed call must equal the other, and the second turn must end with text; the
exit status says whether they did.
"""

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
from openai import OpenAI

CITY = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "country": {"type": "string", "maxLength": 24},
        "capital": {"type": "boolean"},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["city", "country", "capital", "population_millions"],
    "additionalProperties": False,
}
CITIES = [
    "Paris", "Tokyo", "Lagos", "Lima", "Oslo", "Cairo", "Delhi", "Rome", "Madrid", "Berlin",
    "Seoul", "Hanoi", "Nairobi", "Quito", "Dublin", "Vienna", "Athens", "Lisbon", "Manila", "Accra",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 32},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--check", action="store_true", help="fail unless every reply is as asked")
    args = ap.parse_args()
    # The server checks no key unless started with --api-key; the client insists on one.
    client = OpenAI(base_url=args.base_url, api_key="none")
    model = client.models.list().data[0].id
    bad = []

    def city(i, name):
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Describe the city of {name} as JSON."}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "city", "schema": CITY, "strict": True},
            },
            temperature=0.7,
            seed=i,
            max_tokens=96,
        )
        return name, r.choices[0]

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda a: city(*a), enumerate(CITIES)))
    valid = 0
    for name, choice in replies:
        try:
            v = json.loads(choice.message.content)
            jsonschema.validate(v, CITY)
            valid += 1
            print(f"{name}: {json.dumps(v)}")
        except (json.JSONDecodeError, jsonschema.ValidationError, TypeError) as e:
            bad.append(f"{name}: {choice.message.content!r} ({choice.finish_reason}): {e}")
    print(f"json_schema: {valid} of {len(CITIES)} replies parse and validate")

    question = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    ask = dict(model=model, tools=[WEATHER], tool_choice="required", temperature=0, max_tokens=64)
    r = client.chat.completions.create(messages=question, **ask)
    choice = r.choices[0]
    calls = choice.message.tool_calls or []
    print(f"tool_choice=required: finish_reason {choice.finish_reason}, calls {calls}")
    if choice.finish_reason != "tool_calls" or not calls:
        bad.append(f"no tool call: {choice}")
        return report(bad)
    call = calls[0]
    try:
        jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    except (json.JSONDecodeError, jsonschema.ValidationError) as e:
        bad.append(f"the call's arguments {call.function.arguments!r}: {e}")
    if call.function.name != "get_weather" or not call.id:
        bad.append(f"the call {call}")

    # Streamed: the deltas add up to the same call.
    name, arguments, ids, finish = "", "", set(), None
    for chunk in client.chat.completions.create(messages=question, stream=True, **ask):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            ids.add(d.index)
            if d.function and d.function.name:
                name += d.function.name
            if d.function and d.function.arguments:
                arguments += d.function.arguments
    print(f"streamed: {name}({arguments}), finish_reason {finish}")
    if (name, finish, ids) != ("get_weather", "tool_calls", {0}) or (
        json.loads(arguments or "null") != json.loads(call.function.arguments)
    ):
        bad.append(f"the streamed call {name}({arguments}) {finish} differs from {call}")

    # The second turn: the tool's answer, and a reply in words.
    turn = question + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18, "sky": "clear"}'},
    ]
    r = client.chat.completions.create(
        model=model, messages=turn, tools=[WEATHER], temperature=0, max_tokens=32
    )
    answer = r.choices[0]
    print(f"second turn: {answer.message.content!r} ({answer.finish_reason})")
    if not (answer.message.content or "").strip() or answer.finish_reason not in ("stop", "length"):
        bad.append(f"the second turn: {answer}")
    return report(bad) if args.check else 0


def report(bad):
    for b in bad:
        print(f"FAIL {b}", file=sys.stderr)
    print("openai client check: " + ("ok" if not bad else f"{len(bad)} failures"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
