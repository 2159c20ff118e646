"""The product tree's own rules (issue 25): docs/architecture.md's map names every module, no file is over
500 lines, and no two modules import each other at load time; and the linter's (issue 45): `make test`
runs it first, and every `# noqa` names a rule it runs and says why."""

from __future__ import annotations

import ast
import re
import subprocess
import tokenize
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("benchmarks", "runners")
MAX_LINES = 500


def product_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def readme_map() -> str:
    """The module map of docs/architecture.md (the README's "How it works" until issue 46)."""
    return (ROOT / "docs" / "architecture.md").read_text().split("```", 2)[1]


def test_the_readme_map_names_every_module_and_folder():
    text = readme_map()
    names = set(re.findall(r"[\w]+(?=\.py\b)|[\w]+(?=/)", text))
    # a module of a sub-package may be named by its folder ("launchers/: one small module per launcher")
    missing = [str(p.relative_to(ROOT)) for p in product_files()
               if p.stem not in ("__init__", "__main__") and p.stem not in names
               and (p.parent.parent == ROOT or p.parent.name not in names)]
    missing += [str(d.relative_to(ROOT)) + "/" for package in PACKAGES for d in (ROOT / package).iterdir()
                if d.is_dir() and d.name != "__pycache__" and d.name not in names]
    assert not missing, f"docs/architecture.md's map does not name: {missing}"


def test_no_product_file_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in product_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def load_time_imports(path: Path, modules: set[str]) -> set[str]:
    """Product modules this one imports at its top level (a function's lazy import is not a cycle at load)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = ".".join(filter(None, (base if node.level else "", node.module or "")))
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for dep in graph[module]:
            if dep not in index:
                visit(dep)
                low[module] = min(low[module], low[dep])
            elif dep in stack:
                low[module] = min(low[module], index[dep])
        if low[module] == index[module]:
            component = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_import_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_two_product_modules_import_each_other_at_load_time():
    files = product_files()
    modules = {module_name(p) for p in files}
    graph = {module_name(p): load_time_imports(p, modules) for p in files}
    assert any(graph.values()), "the import graph came out empty: the reader is broken"
    assert import_circles(graph) == []


def every_import(path: Path) -> set[str]:
    """Every module path imports, lazily in a function included (absolute names; relative ones resolved)."""
    package = module_name(path).rpartition(".")[0] if path.name != "__init__.py" else module_name(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = ".".join(filter(None, (base if node.level else "", node.module or "")))
            found.update([module, *(f"{module}.{alias.name}" for alias in node.names)])
    return found


def test_no_two_product_modules_import_each_other_even_lazily():
    """Lazy imports included (issue 45): a function's import that closes a circle still ties the modules together, and
    hides the layer it runs back up to. Each circle broken on 2026-12-05 was broken by moving one fact to its layer
    (the reference loop's refusals into config, Distributed and world_section into distributed/world.py, AS_LIMIT_NEAR
    into memory.py), not by an import hidden in a function."""
    files = product_files()
    modules = {module_name(p) for p in files}
    graph = {module_name(p): (every_import(p) & modules) - {module_name(p)} for p in files}
    assert any(graph.values()), "the import graph came out empty: the reader is broken"
    assert import_circles(graph) == []


# benchmarks/'s floors, top to bottom (docs/architecture.md's map): a module imports only from its own floor or below.
FLOORS = ("benchmarks", "comm", "run", "frameworks", "results", "settings", "data", "distributed", "measure", "tta", "core")


def floor_of(module: str) -> int:
    """benchmarks.<package>...: its package's floor; a module at the top (cli, entry, runspec): the top floor."""
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in FLOORS) else 0


def test_benchmarks_packages_are_floors_no_import_runs_back_up():
    """The folder tree is the architecture diagram (issue 45): every import of benchmarks/, lazy ones included, goes
    to its own package or one below (FLOORS); the package's face (`benchmarks.__version__`) is read from anywhere."""
    files = [p for p in product_files() if p.relative_to(ROOT).parts[0] == "benchmarks"]
    modules = {module_name(p) for p in files}
    assert {p.relative_to(ROOT).parts[1] for p in files if len(p.relative_to(ROOT).parts) > 2} == set(FLOORS[1:])
    up = sorted(f"{module_name(p)} -> {target}" for p in files for target in every_import(p) & modules
                if target != "benchmarks" and floor_of(target) < floor_of(module_name(p)))
    assert up == []
    assert floor_of("benchmarks.run.worker") < floor_of("benchmarks.core.errors")  # the reader works


def test_the_host_never_imports_bench_s_command_line():
    """benchrun hands a typed RunSpec across every boundary (benchmarks/runspec.py): bench's CLI module is
    bench's, and reading bench's argv anywhere else would be a second parse of it."""
    importers = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "runners").rglob("*.py"))
                 if "benchmarks.cli" in every_import(p)]
    assert not importers, importers
    assert "benchmarks.runspec" in every_import(ROOT / "runners" / "dispatch.py")  # the reader sees imports


NOQA = re.compile(r"#\s*noqa\b(?P<colon>:?)\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<why>.*)")


def noqa_problems(path: Path, selected: list[str]) -> list[str]:
    """Each `# noqa` comment that names no rule, a rule the linter does not run, or no reason."""
    problems = []
    with path.open("rb") as source:
        for token in tokenize.tokenize(source.readline):
            if token.type != tokenize.COMMENT or not (found := NOQA.search(token.string)):
                continue
            where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{token.start[0]}"
            codes = re.split(r"\s*,\s*", found["codes"] or "")
            if not found["colon"] or not found["codes"]:
                problems.append(f"{where}: a bare noqa silences every rule")
            elif unknown := [c for c in codes if not c.startswith(tuple(selected))]:
                problems.append(f"{where}: {', '.join(unknown)} is not a rule the linter runs")
            elif len(found["why"].strip(" -:()")) < 8:
                problems.append(f"{where}: says no why")
    return problems


def test_every_noqa_names_a_rule_the_linter_runs_and_says_why(tmp_path):
    selected = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["select"]
    sources = [p for p in ROOT.rglob("*.py") if not {"wheelhouse", "wheelhouse-late", ".venv", "build"} & set(p.parts)]
    assert len(sources) > 100, "the source scan came out short: the reader is broken"
    assert [p for path in sources for p in noqa_problems(path, selected)] == []
    planted = tmp_path / "planted.py"
    planted.write_text("import os  # noqa\nimport re  # noqa: Q000 - not run\nimport sys  # noqa: F401\n"
                       "import io  # noqa: F401 - re-exported for the callers\n")
    assert [p.split(": ", 1)[1] for p in noqa_problems(planted, selected)] == [
        "a bare noqa silences every rule", "Q000 is not a rule the linter runs", "says no why"]


def test_make_test_runs_the_linter_and_the_strict_docs_build_before_the_tests():
    planned = subprocess.run(["make", "-n", "-C", str(ROOT), "test"], capture_output=True, text=True, check=True).stdout
    lines = planned.splitlines()
    lint = next(i for i, line in enumerate(lines) if "ruff check" in line)
    docs = next(i for i, line in enumerate(lines) if "mkdocs build --strict" in line)
    tests = next(i for i, line in enumerate(lines) if "pytest" in line)
    assert lint < docs < tests, planned
