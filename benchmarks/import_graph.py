"""The import graph of src/rvm: its cycles (strongly connected components) and biggest rooms.

See `rvm.testing.import_graph` for what counts as an import (lazy ones too, not TYPE_CHECKING).

Run: python benchmarks/import_graph.py [SRC_DIR]   (default: this tree's src/rvm; pass another
tree's src/rvm to compare, e.g. an older checkout)
"""

from __future__ import annotations

import sys
from pathlib import Path

from rvm.testing.import_graph import cycles, graph, module_files


def _room(name: str, path: Path) -> str:
    """The package a module is counted in: rvm.runtime's subpackages apart, else rvm.<pkg>."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    parts = package.split(".")
    return ".".join(parts[:3] if parts[:2] == ["rvm", "runtime"] else parts[:2])


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "src" / "rvm"
    g = graph(src)
    comps = cycles(g)
    print(f"{src}: {len(g)} modules, {sum(map(len, g.values()))} import edges")
    print(f"cycles (SCCs > 1 module): {len(comps)}, sizes {[len(c) for c in comps]}")
    for comp in comps:
        print("  " + ", ".join(comp))
    files = module_files(src)
    sizes: dict[str, int] = {}
    for name, path in files.items():
        room = _room(name, path)
        sizes[room] = sizes.get(room, 0) + len(path.read_text().splitlines())
    print(
        "biggest rooms (lines): "
        + ", ".join(f"{k} {v}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:8])
    )
    big = sorted(files.items(), key=lambda kv: -len(kv[1].read_text().splitlines()))[:6]
    print(
        "biggest modules (lines): "
        + ", ".join(f"{k} {len(p.read_text().splitlines())}" for k, p in big)
    )


if __name__ == "__main__":
    main()
