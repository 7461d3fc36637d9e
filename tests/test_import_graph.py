"""corral's modules import one another without a cycle: the graph of every `import` statement
(at the top or inside a function) between corral's modules, read with `ast`, has no strongly
connected component of more than one module and no module importing itself. A package's
`__init__` counts as its own module; importing a submodule does not count as importing its
package."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("automata", "kernels", "model", "tools", "integrations")


def modules() -> dict[str, Path]:
    """corral's module names (`corral.tools.batch`, `corral.tools` for its `__init__`) and
    files."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(("corral", *parts))] = path
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The corral modules the file `path` (module `name`) names in its import statements: for
    `from P import x`, the module `P.x` when there is one, else `P`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1],
                                 *filter(None, [base])])  # fmt: skip
            for alias in node.names:
                full = f"{base}.{alias.name}"
                out.add(full if full in known else base)
    return out & known


def test_no_import_cycle_among_corral_modules():
    found = modules()
    names = sorted(found)
    index = {name: i for i, name in enumerate(names)}
    edges = [
        (index[name], index[target])
        for name in names
        for target in imported(found[name], name, set(found))
    ]
    assert names and edges
    self_imports = [names[a] for a, b in edges if a == b]
    assert self_imports == []
    rows, cols = np.array(edges).T
    graph = csr_array((np.ones(len(edges)), (rows, cols)), shape=(len(names), len(names)))
    _, labels = connected_components(graph, directed=True, connection="strong")
    groups = {}
    for name, label in zip(names, labels, strict=True):
        groups.setdefault(label, []).append(name)
    cycles = [group for group in groups.values() if len(group) > 1]
    assert cycles == []
