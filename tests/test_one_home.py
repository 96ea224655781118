"""Each rule has one home, no module reaches into another's privates, and no imports cycle.

Read from the source (AST) of every module under grpoctl/, so a second copy of a rule
fails here the day it is written, wherever it is. The registry's migrations are left
out on purpose: a migration keeps a frozen copy of what it rewrites (0002 its own
flatten and config hash), so that changing the live code never changes an old migration.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "grpoctl"
FROZEN = PACKAGE / "registry" / "migrations" / "versions"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, tuple[Path, ast.Module]] = {
    _module_name(p): (p, ast.parse(p.read_text(), filename=str(p)))
    for p in sorted(PACKAGE.rglob("*.py"))
    if FROZEN not in p.parents
}


def _definitions() -> Iterator[tuple[str, ast.AST]]:
    for module, (_, tree) in MODULES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield module, node


def _calls(node: ast.AST) -> Iterator[ast.Call]:
    return (n for n in ast.walk(node) if isinstance(n, ast.Call))


def _call_name(call: ast.Call) -> str:
    return ast.unparse(call.func)


# ---------------------------------------------------------------------------- one home per rule


def _is_value_parser(node: ast.AST) -> bool:
    """Reads text as YAML (not a file's contents): what an override's value parser does."""
    if not isinstance(node, ast.FunctionDef):
        return False
    for call in _calls(node):
        if _call_name(call) in ("yaml.safe_load", "yaml.load", "OmegaConf.from_dotlist"):
            reads_a_file = any(
                isinstance(a, ast.Call) and _call_name(a).endswith(("read_text", "read_bytes", "read"))
                for a in call.args
            )
            if not reads_a_file:
                return True
    return node.name.lstrip("_") in ("parse_value", "parse_override_value")


def _is_flatten(node: ast.AST) -> bool:
    """Walks a nested mapping into dotted keys: recursive, over .items(), with a prefix."""
    if not isinstance(node, ast.FunctionDef):
        return False
    recursive = any(_call_name(c) == node.name for c in _calls(node))
    over_items = any(_call_name(c).endswith(".items") for c in _calls(node))
    has_prefix = any(a.arg == "prefix" for a in node.args.args)
    return "flatten" in node.name or (recursive and over_items and has_prefix)


def _is_value_formatter(node: ast.AST) -> bool:
    """Writes a float as a person would (3e-5): the mantissa-and-exponent idiom, `:.6e`."""
    if not isinstance(node, ast.FunctionDef):
        return False
    specs = [
        ast.unparse(n.format_spec)
        for n in ast.walk(node)
        if isinstance(n, ast.FormattedValue) and n.format_spec is not None
    ]
    return any(".6e" in spec for spec in specs) or node.name.lstrip("_") in ("format_value", "format_config_value")


def _is_run_data(node: ast.AST) -> bool:
    return isinstance(node, ast.ClassDef) and node.name == "RunData"


RULES: dict[str, tuple[Callable[[ast.AST], bool], str]] = {
    "the override-value parser": (_is_value_parser, "grpoctl.config.parse_value"),
    "flatten": (_is_flatten, "grpoctl.run_identity.flatten"),
    "the config-value formatter": (_is_value_formatter, "grpoctl.formatting.format_config_value"),
    "RunData": (_is_run_data, "grpoctl.data.run_data.RunData"),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_has_exactly_one_home(rule):
    is_copy, home = RULES[rule]
    found = sorted(f"{module}.{node.name}" for module, node in _definitions() if is_copy(node))
    assert found == [home], f"{rule}: expected only {home}, found {found}"


def test_the_checks_see_a_copy(tmp_path):
    """The detectors are not vacuous: a pasted second copy of each rule is caught."""
    pasted = ast.parse(
        "def my_flatten(d, prefix=''):\n    return {k: v for k, v in d.items()}\n"
        "def _leaves(d, prefix=''):\n    for k, v in d.items():\n        yield from _leaves(v, prefix + k)\n"
        "def label(v):\n    return f'{v:.6e}'\n"
        "def read(raw):\n    return yaml.safe_load(raw)\n"
        "class RunData:\n    pass\n"
    )
    defs = [n for n in ast.walk(pasted) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert [n.name for n in defs if _is_flatten(n)] == ["my_flatten", "_leaves"]
    assert [n.name for n in defs if _is_value_formatter(n)] == ["label"]
    assert [n.name for n in defs if _is_value_parser(n)] == ["read"]
    assert [n.name for n in defs if _is_run_data(n)] == ["RunData"]


def test_every_reward_name_is_a_valid_prompt_reward():
    """No reward key that prompt.reward can never name (the dead r1_zero_compact was one)."""
    from grpoctl.rewards import REWARD_FNS
    from grpoctl.rules import REWARDS

    assert tuple(REWARD_FNS) == REWARDS


# ---------------------------------------------------------------------------- imports


def _imports(module: str, tree: ast.Module) -> Iterator[tuple[str, list[str], int]]:
    """(imported grpoctl module, names imported from it, line) for every import, wherever it
    stands: at the top, inside a function or under TYPE_CHECKING."""
    is_package = MODULES[module][0].name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "grpoctl":
                    yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from its own package (or a parent)
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "grpoctl":
                yield target, [a.name for a in node.names], node.lineno


def _edges(module: str, tree: ast.Module) -> Iterator[tuple[str, int]]:
    """The grpoctl modules `module` imports; `from pkg import sub` counts as importing pkg.sub."""
    for target, names, line in _imports(module, tree):
        submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
        if submodules:
            yield from ((s, line) for s in submodules)
        if len(submodules) < len(names) or not names:
            if target in MODULES:
                yield target, line


def test_no_private_name_is_imported_across_modules():
    found = []
    for module, (path, tree) in MODULES.items():
        for target, names, line in _imports(module, tree):
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private += [p for p in target.split(".") if p.startswith("_") and not p.startswith("__")]
            if private and target != module:
                found.append(f"{path.relative_to(ROOT)}:{line}: {target} {private}")
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules():
    graph = {m: {t for t, _ in _edges(m, tree) if t != m} for m, (_, tree) in MODULES.items()}
    assert not _cycles(graph), f"import cycles: {_cycles(graph)}"


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _package(module: str) -> str:
    """The floor a module stands on: grpoctl's subpackage or top-level module it is in."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages():
    # Lazy and type-checking imports count: a cycle between floors is a cycle however it is reached.
    graph: dict[str, set[str]] = {}
    for module, (_, tree) in MODULES.items():
        graph.setdefault(_package(module), set()).update(
            _package(t) for t, _ in _edges(module, tree) if _package(t) != _package(module)
        )
    assert not _cycles(graph), f"package cycles: {_cycles(graph)}"


def test_the_floors_contract_names_every_package():
    """pyproject.toml's layers contract (checked by `lint-imports` in .ci/run) places every
    subpackage and top-level module, so that a new one cannot stand outside the floors."""
    import tomllib

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    placed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    packages = {_package(m) for m in MODULES} - {"grpoctl", "grpoctl.__main__"}
    assert packages - placed == set(), "not on any floor of the contract"
    assert placed - packages == set(), "on a floor but not in the package"
