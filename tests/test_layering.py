"""The import rules. The contracts of .importlinter (the layer picture of docs/architecture.md; scripts/check
runs them) hold, and break when a subsystem imports the agent. And what import-linter cannot say: no module
imports a private module (``_name``) of another package. Each package offers what others may use through its
public modules; what is private may change without warning to anyone outside it."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "minihermes"


def _package_of(module: str) -> str:
    """The top-level subpackage a module belongs to (``minihermes.runtime.store._x`` -> ``runtime``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private_imports(path: Path) -> list[str]:
    here = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    own = _package_of(here)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if not name.startswith("minihermes.") or _package_of(name) == own:
                continue
            if any(part.startswith("_") and not part.startswith("__") for part in name.split(".")[1:]):
                found.append(f"{here}:{node.lineno} imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()))
def test_no_package_imports_another_packages_private_modules(package: str) -> None:
    found = [line for path in sorted((ROOT / package).rglob("*.py")) for line in _private_imports(path)]
    assert not found, "\n".join(found)


def _lint_imports(repo: Path) -> subprocess.CompletedProcess[str]:
    """The contracts of ``repo``'s .importlinter over ``repo``'s ``minihermes``. In a child process started in
    ``repo`` (so that ``minihermes`` is that copy): import-linter configures logging with ``dictConfig``,
    which would disable every logger of this test session."""
    config = repo / ".importlinter"
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, show_timings=False))"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo)


def test_the_import_contracts_hold() -> None:
    """The contracts of .importlinter (also run by scripts/check), so that CI enforces them too."""
    done = _lint_imports(ROOT.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_subsystem_importing_the_agent_breaks_the_contracts(tmp_path: Path) -> None:
    """Subsystems hear the agent through messages and turn events, never by importing it: in a copy of the
    package, ``work`` and ``skills`` importing ``minihermes.agent.memory`` break the check, which passes on
    the unmodified copy."""
    shutil.copytree(ROOT, tmp_path / "minihermes", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT.parent / ".importlinter", tmp_path / ".importlinter")
    clean = _lint_imports(tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    for module in ("work/goals.py", "skills/curator.py"):
        path = tmp_path / "minihermes" / module
        path.write_text(path.read_text() + "\nfrom minihermes.agent.memory import Memory  # noqa: E402\n")
    broken = _lint_imports(tmp_path)
    assert broken.returncode != 0, broken.stdout
    assert "BROKEN" in broken.stdout
    assert "minihermes.work.goals -> minihermes.agent.memory" in broken.stdout
    assert "minihermes.skills.curator -> minihermes.agent.memory" in broken.stdout
