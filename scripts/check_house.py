#!/usr/bin/env python3
"""Checks the house rules that the compiler does not: no import circle between the modules of
a crate (a module may use its own ancestors and submodules, and the files of one folder below
the crate root may use each other: they are one family), and no function over 150 lines in
the listed source trees outside tests.

    python3 scripts/check_house.py            # exit 1 and one line a breach when any
    python3 scripts/check_house.py --graph    # also print every module's imports

Imports are read from `use crate::…`, `use super::…` and paths written out in the code
(`crate::a::b::f(…)`), after comments and strings are removed."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ROOT / "crates"
LONG_FN_TREES = ["crates/webgpu/src"]
# The op table's case lists are data written as code, one list a family: tests, not held to it.
LONG_FN_EXEMPT = ["crates/webgpu/src/testing"]
MAX_FN_LINES = 150


def strip(src: str) -> str:
    """`src` with comments, strings and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif m := re.match(r'b?r(#*)"', src[i : i + 260]) if c in "br" and (
            i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")
        ) else None:
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", src[i : i + 16])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def crate_modules(src_dir: Path) -> dict:
    """Module path (a tuple) -> file, for the `.rs` files of one crate's src folder."""
    mods = {}
    for f in src_dir.rglob("*.rs"):
        rel = f.relative_to(src_dir).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
            parts = parts[:-1]
        if parts and parts[0] == "bin":
            continue
        mods[tuple(parts)] = f
    return mods


def imports(text: str, me: tuple, mods: dict) -> set:
    """The modules of this crate whose items `text` (of module `me`) names."""
    found = set()
    # A `use` tree's leading path, and every written-out `crate::` or `super::` path.
    paths = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)(?:::\w+)*)(::\{([^;]*)\})?", text):
        base = m.group(1).split("::")
        if m.group(3):
            for leaf in re.split(r"[,\s]+", re.sub(r"\{[^{}]*\}", "", m.group(3))):
                leaf = leaf.strip()
                if leaf and leaf not in ("self", "*"):
                    paths.append(base + leaf.split("::"))
            paths.append(base)
        else:
            paths.append(base)
    for m in re.finditer(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text):
        paths.append(m.group(1).split("::"))
    for p in paths:
        cur = list(me)
        rest = []
        if p[0] == "crate":
            cur, rest = [], p[1:]
        else:
            rest = list(p)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    cur = cur[:-1]
                rest = rest[1:]
        path = cur + rest
        # The longest prefix that is a module file.
        for k in range(len(path), -1, -1):
            if tuple(path[:k]) in mods:
                found.add(tuple(path[:k]))
                break
    found.discard(me)
    return found


def circles(graph: dict) -> list:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def check_circles(show: bool) -> list:
    breaches = []
    for src_dir in sorted(CRATES.glob("*/src")):
        mods = crate_modules(src_dir)
        graph = {}
        for mod, f in mods.items():
            deps = imports(strip(f.read_text()), mod, mods)
            # A module and its ancestors or submodules are one tree: those edges are free.
            graph[mod] = {
                d for d in deps if d[: len(mod)] != mod and mod[: len(d)] != d
            }
            if show and graph[mod]:
                name = "::".join(mod) or "<root>"
                print(f"{src_dir.parent.name}::{name} -> "
                      + ", ".join("::".join(d) for d in sorted(graph[mod])))
        for comp in circles(graph):
            family = {m[:1] for m in comp}
            if len(family) == 1 and all(len(m) >= 2 for m in comp):
                continue
            files = [str(mods[m].relative_to(ROOT)) for m in comp]
            ties = [
                f"{mods[a].relative_to(ROOT)} -> {mods[b].relative_to(ROOT)}"
                for a in comp for b in sorted(graph[a]) if b in comp
            ]
            breaches.append(f"import circle: {', '.join(files)} ({'; '.join(ties)})")
    return breaches


def long_functions() -> list:
    breaches = []
    for tree in LONG_FN_TREES:
        for f in sorted((ROOT / tree).rglob("*.rs")):
            if any(f.is_relative_to(ROOT / e) for e in LONG_FN_EXEMPT):
                continue
            text = strip(f.read_text())
            # Test modules are not held to the rule.
            for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
                a = m.end() - 1
                b = match_brace(text, a)
                text = text[:a] + "\n" * text.count("\n", a, b) + text[b:]
            for m in re.finditer(r"\bfn\s+(\w+)", text):
                j = m.end()
                depth = 0
                while j < len(text):
                    ch = text[j]
                    if ch in "(<[":
                        depth += 1
                    elif ch in ")>]" and not (ch == ">" and text[j - 1] == "-"):
                        depth -= 1
                    elif ch == ";" and depth <= 0:
                        j = -1
                        break
                    elif ch == "{" and depth <= 0:
                        break
                    j += 1
                if j < 0 or j >= len(text):
                    continue
                end = match_brace(text, j)
                lines = text.count("\n", m.start(), end) + 1
                if lines > MAX_FN_LINES:
                    line = text.count("\n", 0, m.start()) + 1
                    breaches.append(
                        f"long function: {f.relative_to(ROOT)}:{line} `{m.group(1)}` is "
                        f"{lines} lines (at most {MAX_FN_LINES})"
                    )
    return breaches


def match_brace(text: str, a: int) -> int:
    """The index past the brace that closes the one at `a`."""
    depth = 0
    for j in range(a, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def main() -> int:
    breaches = check_circles("--graph" in sys.argv) + long_functions()
    for b in breaches:
        print(b)
    if breaches:
        print(f"{len(breaches)} breach(es) of the house rules (scripts/check_house.py)")
        return 1
    print("house rules hold: no import circle between modules, no long function")
    return 0


if __name__ == "__main__":
    sys.exit(main())
