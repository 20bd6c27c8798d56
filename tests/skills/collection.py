"""A collection of skill folders shaped like the public ones (anthropics/skills and the like): long
descriptions, long bodies, scripts, references, binary assets, a license, unknown front-matter keys,
``allowed-tools``, front matter that is not strict YAML, a skill with no front matter at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

LONG_DESCRIPTION = (
    "Comprehensive PDF manipulation toolkit for extracting text and tables, creating new PDFs, merging and "
    "splitting documents, and handling forms. "
    + " ".join(
        f"When Claude needs to fill in PDF form number {i}, or programmatically process, generate, "
        "or analyze PDF documents at scale, use this skill."
        for i in range(12)
    )
)
assert len(LONG_DESCRIPTION) > 1024

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
FONT = bytes((i * 37) % 256 for i in range(5000))

PDF_SKILL = f"""---
name: pdf
description: {LONG_DESCRIPTION}
license: Proprietary. LICENSE.txt has complete terms
allowed-tools: Bash, Read, Write, NotebookEdit
author: the collection's authors
---

# PDF Processing Guide

For advanced features, see reference.md. If you need to fill out a PDF form, read forms.md and follow
its instructions.

## Checking a form

Run `python3 scripts/check_fillable_fields.py` to see whether the PDF has fillable fields.
"""

CHECK_SCRIPT = """#!/usr/bin/env python3
import json
import sys

print(json.dumps({"fillable": True, "fields": ["name", "date"], "argv": sys.argv[1:]}))
"""

WEBAPP_BODY = (
    "# Web Application Testing\n\nRun `python scripts/with_server.py --help` first.\n\n"
    + "\n".join(
        f"## Step {i}\n\nUse Playwright to check page {i}: wait for networkidle, then inspect the DOM, take a "
        f"screenshot and compare it with the baseline; on a mismatch report the selector and the diff.\n"
        for i in range(120)
    )
)
assert len(WEBAPP_BODY) > 20_000

WEBAPP_SKILL = (
    "---\nname: webapp-testing\ndescription: Toolkit for interacting with and testing local web applications "
    "using Playwright.\nlicense: Complete terms in LICENSE.txt\nmetadata:\n  author: example\n  version: "
    '"1.0"\n---\n\n' + WEBAPP_BODY
)

BRAND_SKILL = """---
name: brand-guidelines
description: Applies the brand's official colors and typography. Use when: brand colors, style guidelines or visual formatting apply.
---

Use the font in assets/font.ttf and the palette in palette.json.
"""

MINIMAL_SKILL = "# Minimal\n\nA skill folder whose SKILL.md has no front matter: the folder names it.\n"


def write_collection(root: Path) -> dict[str, dict[str, bytes]]:
    """Write the collection under ``root``; returns ``{folder: {path: bytes}}`` of what was written."""
    skills: dict[str, dict[str, bytes]] = {
        "pdf": {
            "SKILL.md": PDF_SKILL.encode(),
            "reference.md": b"# PDF reference\n\npypdf, pdfplumber, qpdf: advanced usage.\n",
            "forms.md": b"# Forms\n\n1. Run scripts/check_fillable_fields.py\n2. Fill the fields.\n",
            "scripts/check_fillable_fields.py": CHECK_SCRIPT.encode(),
            "LICENSE.txt": b"Proprietary. All rights reserved.\n",
            "assets/logo.png": PNG,
        },
        "webapp-testing": {
            "SKILL.md": WEBAPP_SKILL.encode(),
            "scripts/with_server.py": b"print('server helper')\n",
            "examples/element_discovery.py": b"# discover elements\n",
            "LICENSE.txt": b"Apache License 2.0\n",
        },
        "brand-guidelines": {
            "SKILL.md": BRAND_SKILL.encode(),
            "assets/font.ttf": FONT,
            "palette.json": b'{"primary": "#141413"}\n',
        },
        "minimal": {"SKILL.md": MINIMAL_SKILL.encode()},
    }
    for folder, files in skills.items():
        for rel, data in files.items():
            target = root / folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return skills


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def folder_archive(root: Path) -> str:
    """A folder as ``minihermes skills import`` sends it: read on this machine (links out refused), zipped
    with the executable bits, base64; a lone skill folder goes under its own name. The skill store reads
    no folder itself."""
    import base64

    from minihermes.skills import bundles

    entries, _refused, executable = bundles.read_folder("test", str(root.resolve()), bundles.Limits())
    if "SKILL.md" in entries:
        entries = {f"{root.name}/{rel}": data for rel, data in entries.items()}
        executable = {f"{root.name}/{rel}" for rel in executable}
    return base64.b64encode(bundles.write_zip(entries, executable)).decode()


async def export_folder(node: Any, folder: Path, ctx: Any, **args: Any) -> dict[str, Any]:
    """What ``minihermes skills export DIR`` does: the node's documents with every file, written here."""
    import asyncio
    import base64

    from minihermes.skills import bundles

    out = await node.ask("skill_store", "export_skills", {**args, "with_files": True}, ctx=ctx)
    docs = out["documents"]
    for doc in docs:
        doc["file_bytes"] = {f["path"]: base64.b64decode(f["data"]) for f in doc.get("files") or []}
    written = await asyncio.to_thread(bundles.write_folder, "export", str(folder), docs)  # tmp_path: absolute
    return {**out, "written": written}
