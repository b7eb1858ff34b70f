#!/usr/bin/env python3
"""The shape of rollsafe's imports: circles of files and imports that run up.

Reads every `crate::…`, `super::…` and `self::…` path in `src/` (use trees
and inline paths, outside comments, string literals and `#[cfg(test)]`
modules), maps each to the file that defines the module it names, and prints

- circles: groups of files that import each other (strongly connected
  components of two files or more). A file's import of an enclosing
  module's `mod.rs` (its parent module's API: an error type, a shared
  helper) is not counted: a parent declares its children, so every folder
  would be a circle;
- upward imports: a file of a lower layer importing a higher one, by the
  layers of src/layers.txt.

Exit status 1 when either list is non-empty and `--check` is given (the
unit test in `src/lib.rs` runs the same rules in Rust, so `cargo test`
keeps the shape; this script is the readable report).

Usage: ci/import-graph.py [--check] [--edges]
"""

import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

# Lowest first, from src/layers.txt (`<layer>: <modules>`; `#` comments). A
# module may import its own layer and any lower one; the top-level module of
# a file (`crate::<name>`) decides its layer.
def read_layers():
    layers = []
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "layers.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                name, modules = line.split(":", 1)
                layers.append((name.strip(), modules.split()))
    return layers


LAYERS = read_layers()

LAYER_OF = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}


def strip_code(text):
    """Text without comments, string/char literals and #[cfg(test)] modules."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (
            i and (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i : i + 4]):
            i += len(re.match(r"'(\\.[^']*|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    # Drop `#[cfg(test)] mod x { … }` blocks: tests may reach anywhere.
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", code)
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[: m.start()] + code[j:]


def use_paths(tree):
    """Expands a use tree `a::{b, c::{d, e}}` into paths ['a::b', 'a::c::d', …]."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner = tree[:start], tree[start + 1 : k]
                parts, d, last = [], 0, 0
                for q, c2 in enumerate(inner):
                    d += {"{": 1, "}": -1}.get(c2, 0)
                    if c2 == "," and d == 0:
                        parts.append(inner[last:q])
                        last = q + 1
                parts.append(inner[last:])
                return [p for part in parts if part for p in use_paths(prefix + part)]
    return [re.sub(r"::(self|\*)$", "", tree.split("as")[0] if "::" in tree else tree)]


def module_of(rel):
    """`verify/checks/plan.rs` -> ['verify', 'checks', 'plan']; mod.rs is its folder."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main") and len(parts) > 1 or parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def file_for(modules, path):
    """The file defining the longest prefix of `path` that is a module."""
    for k in range(len(path), 0, -1):
        key = tuple(path[:k])
        if key in modules:
            return modules[key]
    return None


def read_graph():
    files = {}
    for root, _, names in os.walk(SRC):
        for name in names:
            if name.endswith(".rs"):
                full = os.path.join(root, name)
                files[os.path.relpath(full, SRC).replace(os.sep, "/")] = full
    modules = {tuple(module_of(rel)): rel for rel in files if rel not in ("lib.rs", "main.rs")}
    edges = {rel: set() for rel in files}
    for rel, full in files.items():
        here = module_of(rel) if rel not in ("lib.rs", "main.rs") else []
        with open(full, encoding="utf-8") as f:
            code = strip_code(f.read())
        paths = []
        for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", code):
            paths += use_paths(m.group(1))
        for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
            paths.append(m.group(1))
        for p in paths:
            parts = [x for x in p.split("::") if x]
            if not parts:
                continue
            if parts[0] == "crate":
                target = parts[1:]
            elif parts[0] == "super":
                base = here[:]
                while parts and parts[0] == "super":
                    base, parts = base[:-1], parts[1:]
                target = base + parts
            else:  # self
                target = here + parts[1:]
            dest = file_for(modules, target)
            if dest and dest != rel:
                edges[rel].add(dest)
    return files, edges


def is_ancestor(parent_file, child_file):
    """`sandbox/mod.rs` encloses `sandbox/docker.rs`; `verify/mod.rs` encloses `verify/checks/plan.rs`."""
    if not parent_file.endswith("mod.rs"):
        return False
    folder = parent_file[: -len("mod.rs")]
    return child_file.startswith(folder)


def circles(edges):
    """Strongly connected components of 2+ files, child->ancestor edges dropped (Tarjan)."""
    graph = {a: [b for b in bs if not is_ancestor(b, a)] for a, bs in edges.items()}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def top_module(rel):
    return rel.split("/")[0][:-3] if "/" not in rel else rel.split("/")[0]


def upward(edges):
    out = []
    for a in sorted(edges):
        la = LAYER_OF.get(top_module(a))
        for b in sorted(edges[a]):
            lb = LAYER_OF.get(top_module(b))
            if la is not None and lb is not None and lb > la:
                out.append((a, b, LAYERS[la][0], LAYERS[lb][0]))
    return out


def main():
    files, edges = read_graph()
    unknown = sorted({top_module(f) for f in files} - set(LAYER_OF))
    if unknown:
        print("modules in no layer (add them to LAYERS):", ", ".join(unknown))
    if "--edges" in sys.argv:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"edge {a} -> {b}")
    found = circles(edges)
    for comp in found:
        # Name each circle's edges, so a reader sees who imports whom.
        inside = set(comp)
        links = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in inside and not is_ancestor(b, a)]
        print(f"circle: {' , '.join(comp)}")
        for link in links:
            print(f"    {link}")
    ups = upward(edges)
    for a, b, la, lb in ups:
        print(f"upward: {a} ({la}) -> {b} ({lb})")
    print(f"import graph: {len(files)} files, {sum(map(len, edges.values()))} imports, "
          f"{len(found)} circles, {len(ups)} upward imports")
    if "--check" in sys.argv and (found or ups or unknown):
        sys.exit(1)


if __name__ == "__main__":
    main()
