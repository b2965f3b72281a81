"""Do ladle's imports run one way? The package's import graph with each folder (a family) as one unit.

    python benchmarks/import_graph.py            # this checkout's src/ladle
    python benchmarks/import_graph.py --src DIR  # another tree (git archive REV src | tar -x -C DIR)

Every ``import ladle...`` / ``from ladle... import`` of every file counts, inside functions too; a unit is a top-level
module (``config.py``) or a folder (``soups/``, its files together). Where the graph has no cycle, its units can be
stacked so that every import points down (a topological order): no import runs back up the layers. Each cycle is
printed with the imports that close it. Last line: ``units=N imports=E cycles=C units_in_cycles=U``.
"""
from __future__ import annotations

import argparse
import ast
from pathlib import Path


def unit_of(module: str, src: Path) -> str | None:
    """``ladle.soups.gis`` -> ``soups/``, ``ladle.config`` -> ``config.py``; None outside the package."""
    parts = module.split(".")
    if parts[0] != "ladle" or len(parts) < 2:
        return None
    if (src / parts[1]).is_dir():
        return f"{parts[1]}/"
    return f"{parts[1]}.py" if (src / f"{parts[1]}.py").exists() else None


def graph(src: Path) -> dict[str, dict[str, list[str]]]:
    """unit -> {imported unit: ["file:line", ...]}"""
    edges: dict[str, dict[str, list[str]]] = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        here = f"{rel.parts[0]}/" if len(rel.parts) > 1 else rel.name
        edges.setdefault(here, {})
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                there = unit_of(name, src)
                if there and there != here and here != "__init__.py":  # the package's lazy public names
                    seen = edges[here].setdefault(there, [])
                    if f"{rel}:{node.lineno}" not in seen:
                        seen.append(f"{rel}:{node.lineno}")
    return edges


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan's algorithm)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    args = parser.parse_args(argv)
    src = Path(args.src) / "ladle"
    edges = graph(src)
    found = cycles(edges)
    for component in found:
        print("cycle:", ", ".join(component))
        for a in component:
            for b in component:
                for where in edges.get(a, {}).get(b, [])[:3]:
                    print(f"  {a} -> {b}  ({where})")
    imports = sum(len(targets) for targets in edges.values())
    print(f"units={len(edges)} imports={imports} cycles={len(found)} units_in_cycles={sum(map(len, found))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
