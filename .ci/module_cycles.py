#!/usr/bin/env python3
"""Module cycles among sibling modules, from the paths the sources name.

For every directory module (`conversation/`, `agent/`, …) of the crates given, each child
module's references to its siblings (`use super::x`, `super::x::`, `crate::a::x`) are the
edges; a strongly connected component of more than one sibling is a cycle. Method calls on a
type whose `impl` blocks are spread over sibling files are not seen (they name no path).
JavaScript: `import … from "./x.js"` between the files of one directory.

Usage: module_cycles.py [--strict] ROOT ...
Prints each cycle; with --strict, exits 1 when there is one.
"""
import os
import re
import sys


def rust_modules(root):
    """{module path tuple: file} for a crate's src root."""
    mods = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)
            parts = rel[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            if "tests" in parts:
                continue  # a test module (`#[cfg(test)] mod tests;`) may use anything
            mods[tuple(parts)] = os.path.join(dirpath, f)
    return mods


def strip_tests(text):
    cut = re.search(r"^#\[cfg\(test\)\]\s*\nmod tests", text, re.M)
    return text[: cut.start()] if cut else text


def rust_edges(mods):
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        text = strip_tests(open(path, encoding="utf-8").read())
        text = re.sub(r"//[^\n]*", "", text)
        is_dir = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
        # Absolute paths: crate::a::b::…
        for m in re.finditer(r"\bcrate::((?:\w+::)*\w+)", text):
            target = tuple(m.group(1).split("::"))
            edges[mod].add(target)
        # super:: relative to the module's parent
        parent = mod if is_dir else mod[:-1]
        for m in re.finditer(r"\bsuper::((?:super::)*)((?:\w+::)*\w+)", text):
            up = m.group(1).count("super::")
            base = parent[: len(parent) - up] if up else parent
            if len(parent) - up < 0:
                continue
            target = base + tuple(m.group(2).split("::"))
            edges[mod].add(target)
        # use super::{a, b::c}
        for m in re.finditer(r"\buse\s+super::\{([^}]*)\}", text, re.S):
            for item in re.findall(r"(\w+)(?:::|\s*[,}]|\s*$)", m.group(1)):
                edges[mod].add(parent + (item,))
        if is_dir:
            for m in re.finditer(r"\bself::(\w+)", text):
                edges[mod].add(mod + (m.group(1),))
    return edges


def resolve(target, mods):
    """The longest known module prefix of target."""
    for n in range(len(target), 0, -1):
        if target[:n] in mods:
            return target[:n]
    return None


def sibling_graph(mods, edges):
    """{parent: {child: set(child)}} of edges between siblings."""
    graphs = {}
    for src, targets in edges.items():
        for t in targets:
            dst = resolve(t, mods)
            if dst is None or dst == src:
                continue
            # the siblings under their deepest common parent
            common = 0
            while common < min(len(src), len(dst)) and src[common] == dst[common]:
                common += 1
            if common >= len(src) or common >= len(dst):
                continue  # a module and its own ancestor or descendant
            parent = src[:common]
            a, b = src[common], dst[common]
            graphs.setdefault(parent, {}).setdefault(a, set()).add(b)
    return graphs


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}

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
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def js_graph(directory):
    graph = {}
    for f in sorted(os.listdir(directory)):
        if not f.endswith(".js"):
            continue
        text = open(os.path.join(directory, f), encoding="utf-8").read()
        for m in re.finditer(r"""(?:import|export)[^;]*?from\s+["']\./([\w.-]+)\.js["']""", text, re.S):
            graph.setdefault(f[:-3], set()).add(m.group(1))
    return graph


def main(argv):
    strict = "--strict" in argv
    roots = [a for a in argv if a != "--strict"]
    failed = False
    for root in roots:
        if any(f.endswith(".js") for f in os.listdir(root)):
            cycles = {(): sccs(js_graph(root))}
        else:
            mods = rust_modules(root)
            graphs = sibling_graph(mods, rust_edges(mods))
            cycles = {p: sccs(g) for p, g in graphs.items()}
        for parent, comps in sorted(cycles.items()):
            name = os.path.join(root, *parent)
            for comp in comps:
                print(f"{name}: cycle of {len(comp)}: {' '.join(comp)}")
                failed = strict
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
