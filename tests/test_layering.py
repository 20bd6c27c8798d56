"""What import-linter cannot say (scripts/check runs its contracts in .importlinter): no module imports a
private module (``_name``) of another package. Each package offers what others may use through its public
modules; what is private may change without warning to anyone outside it."""

from __future__ import annotations

import ast
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


def test_the_import_contracts_hold() -> None:
    """The contracts of .importlinter (also run by scripts/check), so that CI enforces them too. In a child
    process: import-linter configures logging with ``dictConfig``, which would disable every logger of this
    test session."""
    config = ROOT.parent / ".importlinter"
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, show_timings=False))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent)
    assert done.returncode == 0, done.stdout + done.stderr
