"""The layer order of docs/architecture.md, checked over the AST of ``src/`` and ``cli/``.

A module imports only from its own layer and the layers below it; no module imports a
``_private`` module or name of another package; an import inside a function (allowed only
where a cycle or start-up time needs it) carries a one-line reason as a comment.
"""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ckptsync"
CLI = ROOT / "cli"

# Lowest first; a module's layer is that of the longest prefix naming it ("ckptsync"
# itself names only the package's __init__).
LAYERS: list[tuple[str, ...]] = [
    ("ckptsync.errors", "ckptsync.dtypes", "ckptsync.logging", "ckptsync.flags",
     "ckptsync.not_implemented"),
    ("ckptsync.checkpoint", "ckptsync.datasets", "ckptsync.gfile", "ckptsync.io",
     "ckptsync.blocked_array"),
    ("ckptsync.workers",),
    (
        "ckptsync.graph", "ckptsync.tensor", "ckptsync.tensor_shape", "ckptsync.device",
        "ckptsync.variables", "ckptsync.variable_scope", "ckptsync.initializers",
        "ckptsync.gradients", "ckptsync.model_spec", "ckptsync.model_fn", "ckptsync.model_fn_file", "ckptsync.nn", "ckptsync.ops",
        "ckptsync.session", "ckptsync.indexed_slices", "ckptsync.contrib", "ckptsync.graph_keys", "ckptsync.math", "ckptsync.linalg",
        "ckptsync.summary", "ckptsync.data",
        "ckptsync.losses", "ckptsync.metrics", "ckptsync.layers",
        "ckptsync.random", "ckptsync.debugging", "ckptsync.v2_compat",
    ),
    # The package's own __init__: curated re-exports of the runtime (subpackages above
    # it load lazily through its __getattr__).
    ("ckptsync", "ckptsync.compat"),
    ("ckptsync.train", "ckptsync.estimator"),
    ("ckptsync.serving",),
    ("ckptsync.distributed",),
    ("ckptsync.app",),
    ("ckptsync.cli",),
]


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            covers = module == p or (p != "ckptsync" and module.startswith(p + "."))
            if covers and len(p) > best_len:
                best, best_len = i, len(p)
    if best < 0:
        raise AssertionError(f"module {module} is in no layer of docs/architecture.md")
    return best


@dataclass(frozen=True)
class Import:
    importer: str
    path: pathlib.Path
    line: int
    module: str  # the module imported (a submodule where a name is one)
    name: str | None  # the name taken from it, if any
    in_function: bool


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for p in sorted(SRC.rglob("*.py")):
        parts = p.relative_to(SRC.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    for p in sorted(CLI.glob("*.py")):
        stem = p.stem
        found["ckptsync.cli" if stem == "__init__" else f"ckptsync.cli.{stem}"] = p
    return found


MODULES = _modules()


def _package_of(module: str) -> str:
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str, path: pathlib.Path) -> list[Import]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[Import] = []
    package = _package_of(module)

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == "ckptsync":
                        out.append(Import(module, path, child.lineno, a.name, None, in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] != "ckptsync":
                    continue
                for a in child.names:
                    sub = f"{target}.{a.name}"
                    if sub in MODULES:  # ``from . import errors``: the submodule
                        out.append(Import(module, path, child.lineno, sub, None, in_function))
                    else:
                        out.append(Import(module, path, child.lineno, target, a.name, in_function))
            visit(child, inner)

    visit(tree, False)
    return out


ALL_IMPORTS = [imp for m, p in MODULES.items() for imp in _imports(m, p)]


def _where(imp: Import) -> str:
    return f"{imp.path.relative_to(ROOT)}:{imp.line}"


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [
        f"{_where(i)}: {i.importer} (layer {layer_of(i.importer)}) imports {i.module} "
        f"(layer {layer_of(i.module)})"
        for i in ALL_IMPORTS
        if layer_of(i.module) > layer_of(i.importer)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def _is_private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def test_no_module_imports_a_private_module_or_name_of_another_package():
    bad = []
    for i in ALL_IMPORTS:
        pkg = _package_of(i.importer)
        parts = i.module.split(".")
        for depth in range(1, len(parts)):
            if _is_private(parts[depth]):
                owner = ".".join(parts[:depth])  # the package the private module is in
                if not (pkg == owner or pkg.startswith(owner + ".")):
                    bad.append(f"{_where(i)}: {i.importer} imports private module {i.module}")
                break
        if i.name and _is_private(i.name):
            owner = _package_of(i.module) if i.module in MODULES else i.module
            if not (pkg == owner or pkg.startswith(owner + ".")):
                bad.append(f"{_where(i)}: {i.importer} imports private name {i.module}.{i.name}")
    assert not bad, "cross-package private imports:\n" + "\n".join(bad)


def test_function_level_imports_say_why():
    silent = []
    for i in ALL_IMPORTS:
        if not i.in_function:
            continue
        lines = i.path.read_text().splitlines()
        here, above = lines[i.line - 1], lines[i.line - 2] if i.line >= 2 else ""
        if "#" not in here and not above.strip().startswith("#"):
            silent.append(f"{_where(i)}: {here.strip()}")
    assert not silent, (
        "function-level imports without a one-line reason comment:\n" + "\n".join(silent)
    )


@pytest.mark.parametrize("fake,expected", [
    ("ckptsync.checkpoint.writer", 1),
    ("ckptsync.session.planner", 3),
    ("ckptsync", 4),
    ("ckptsync.cli.infer", 9),
])
def test_layer_table_places_modules_by_their_longest_prefix(fake, expected):
    assert layer_of(fake) == expected
