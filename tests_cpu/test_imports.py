"""How the harness's modules depend on each other, read from their source: no import cycles, and
no import inside a function unless a comment says why."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import harness

PACKAGE = Path(harness.__file__).parent
ROOT = PACKAGE.parent
# A deferred import gives its reason on its line or on a comment above its block: `# deferred: <why>`.
REASON = re.compile(r"# deferred: \S")  # a reason, not the bare word


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def targets(node: ast.AST, known: set[str]) -> list[str]:
    """The harness modules an import statement loads (a package's __init__ as the package)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        # The harness imports absolutely (none relative: test_imports_are_absolute).
        base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    loaded = []
    for name in names:
        while name and name not in known:  # `import harness.x.y` as harness.x.y, or its package
            name = name.rpartition(".")[0]
        if name.startswith("harness"):
            loaded.append(name)
    return loaded


def imports(path: Path, known: set[str]) -> tuple[set[str], list[tuple[int, set[str]]]]:
    """(modules imported at load time, [(line, modules) of each import inside a function])."""
    at_load, deferred = set(), []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found = set(targets(child, known))
                if in_function:
                    deferred.append((child.lineno, found))
                else:
                    at_load.update(found)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(path.read_text()), False)
    return at_load, deferred


def graph() -> tuple[dict[str, set[str]], dict[str, list[int]]]:
    """Each module's harness imports, at load time or inside its functions (a cycle is one either
    way: deferring an import hides it, it does not break it), and the lines of the deferred ones."""
    found = modules()
    known = set(found)
    edges, inside = {}, {}
    for name, path in found.items():
        at_load, deferred = imports(path, known)
        edges[name] = (at_load | {m for _, ms in deferred for m in ms}) - {name}
        inside[name] = [line for line, _ in deferred]
    return edges, inside


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    edges, _ = graph()
    assert cycles(edges) == []


def test_an_import_inside_a_function_says_why():
    _, inside = graph()
    paths = modules()
    unexplained = [f"{name}:{line}: {paths[name].read_text().splitlines()[line - 1].strip()}"
                   for name, lines in inside.items() for line in lines
                   if not explained(paths[name].read_text().splitlines(), line)]
    assert unexplained == []


def test_imports_are_absolute():
    relative = [f"{p}:{n.lineno}" for p in modules().values() for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.ImportFrom) and n.level]
    assert relative == []


def explained(lines: list[str], lineno: int) -> bool:
    """The import on line `lineno` (1-based) carries `# deferred: why`, or so does a comment or an
    import of the block of imports it closes."""
    i = lineno - 1
    while i >= 0 and lines[i].strip().startswith(("import ", "from ", "#")):
        if REASON.search(lines[i]):
            return True
        i -= 1
    return False


def test_a_bare_deferred_comment_is_no_reason():
    assert not explained(["    # deferred:", "    import jax"], 2)
    assert explained(["    # deferred: the worker sets JAX up first", "    import jax"], 2)
    assert not explained(["    x = 1", "    import jax"], 2)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("folder", sorted(p.name for p in PACKAGE.iterdir()
                                          if p.is_dir() and not p.name.startswith("__")))
def test_the_readme_names_every_folder_of_the_harness(folder):
    assert f"`{folder}/`" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("folder", ["tests_cpu", "tests_gpu", "tests_fabric", "fixtures", "reports", "docs"])
def test_the_readme_names_every_top_folder(folder):
    assert f"`{folder}/`" in (ROOT / "README.md").read_text()


def test_the_pytest_plugin_loads_without_jax():
    """The reason its modules give for their deferred imports: pytest loads the plugin before any
    conftest, which may still have to configure JAX (its CPU device count) before JAX loads."""
    probe = "import sys, harness.suite.plugin; sys.exit('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe]).returncode == 0


def listed_modules(init: Path) -> set[str]:
    return set(re.findall(r"^\s*(\w+)\.py\b", init.read_text(), re.M))


@pytest.mark.parametrize("init", [p for p in sorted(PACKAGE.rglob("__init__.py")) if listed_modules(p)],
                         ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_a_package_that_lists_its_modules_lists_each_one(init):
    """A newcomer reads a folder's __init__ first: a listing there that misses a module misleads."""
    have = {p.stem for p in init.parent.glob("*.py")} - {"__init__"}
    listed = listed_modules(init)
    assert (sorted(have - listed), sorted(listed - have)) == ([], []), "(not listed, listed but absent)"
