"""The project files the compiled kernels' cache is keyed by (emulator/jit_cache.py).

A kernel's machine code depends on more than its own file: the compiler freezes the
module globals a kernel reads -- message type codes, record field names, constants --
into the code, and those often live in plain modules (``actors/scribe/types.py``) that
compile nothing themselves. So the key covers every kernel file (a file under the
packages that imports the compiler) and every project module such a file imports,
directly or through another one. A module no kernel file reaches (the engine's Python,
the shard actor) can change without recompiling anything.

Standard library only, and runnable as a script (``python3 emulator/kernel_sources.py``
prints the files, one per line): the Makefile's ``make warm`` depends on the same files
before the project's virtual environment exists.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("emulator", "actors")
COMPILER = "numba"


def _module_file(root: Path, dotted: str) -> Path | None:
    """The project file of module ``dotted`` under one of :data:`PACKAGES`, if any."""
    if dotted.split(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(root: Path, path: Path) -> tuple[bool, set[Path]]:
    """Whether ``path`` imports the compiler, and the project files it imports. O(its
    size)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    compiles = False
    found: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                compiles |= alias.name.split(".")[0] == COMPILER
                f = _module_file(root, alias.name)
                if f is not None:
                    found.add(f)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = package[:len(package) - node.level + 1]
                dotted = ".".join(parent + ((node.module,) if node.module else ()))
            else:
                dotted = node.module or ""
                compiles |= dotted.split(".")[0] == COMPILER
            for alias in node.names:   # a submodule, else a name of the module itself
                f = _module_file(root, f"{dotted}.{alias.name}") or _module_file(root, dotted)
                if f is not None:
                    found.add(f)
    return compiles, found


def kernel_source_files(root: Path = ROOT) -> list[Path]:
    """Every kernel file under :data:`PACKAGES` of ``root`` and every project module they
    import, transitively, sorted. O(the packages' size)."""
    seen: dict[Path, set[Path]] = {}
    todo = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            compiles, found = _imports(root, path)
            seen[path] = found
            if compiles:
                todo.append(path)
    keyed: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in keyed:
            continue
        keyed.add(path)
        todo.extend(seen[path])
    return sorted(keyed)


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    print("\n".join(str(p.relative_to(root)) for p in kernel_source_files(root)))
