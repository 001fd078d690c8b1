"""Import cycles among gcdoctor's modules (module-level and lazy imports alike), for ARCHITECTURE.md's counts.

    python tools/import_cycles.py     # prints each cycle; exit code 1 if there is one
"""
from __future__ import annotations

import ast
import pathlib
import sys

ROOTS = {"gcdoctor": "gcdoctor", "probes": "gcdoctor.probes", "rules": "gcdoctor.rules"}


def graph() -> dict[str, set[str]]:
    mods: dict[str, pathlib.Path] = {}
    for root, pkg in ROOTS.items():
        for p in pathlib.Path(root).rglob("*.py"):
            parts = [x for x in p.relative_to(root).with_suffix("").parts if x != "__init__"]
            mods[".".join([pkg, *parts])] = p
    g: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n != m and not m.startswith(n + "."):
                    g[m].add(n)
    # the probes package imports the modules its experiment table names ("module:Class")
    table = pathlib.Path("gcdoctor/experiments.py")
    if table.is_file() and "gcdoctor.probes" in g:
        for node in ast.walk(ast.parse(table.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ":" in node.value:
                mod = "gcdoctor.probes." + node.value.split(":")[0]
                if mod in g:
                    g["gcdoctor.probes"].add(mod)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
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
    for v in g:
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    found = cycles(graph())
    for comp in found:
        print(len(comp), " ".join(comp))
    print(len(found), "import cycles")
    sys.exit(1 if found else 0)
