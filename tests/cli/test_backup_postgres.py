"""``minihermes backup`` / ``restore`` on the PostgreSQL store: ``pg_dump`` of the store's schema and the data
dir's files under one manifest; ``pg_restore`` refuses a schema that exists already."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

from minihermes.runtime.store import open_store
from tests.store.conftest import drop_schema, requires_postgres

from .test_backup import minihermes

S = ("acme", "main")


def config(path: Path, schema: str, data_dir: Path) -> Path:
    path.write_text(
        f'[node]\nbackend = "postgres"\nbackend_options = {{ schema = "{schema}" }}\ndata_dir = "{data_dir}"\n'
    )
    return path


async def put(schema: str, value: object) -> None:
    async with open_store("postgres", schema=schema) as store:
        await store.kv.put(S, "k", value)


async def get(schema: str) -> object:
    async with open_store("postgres", schema=schema) as store:
        return await store.kv.get(S, "k")


@requires_postgres
def test_pg_dump_backup_and_restore(tmp_path: Path) -> None:
    schema = f"test_{uuid.uuid4().hex[:12]}"
    data = tmp_path / "data"
    data.mkdir()
    (data / "credential.key").write_text("kept")
    try:
        asyncio.run(put(schema, {"v": 1}))
        cfg = config(tmp_path / "node.toml", schema, data)
        done = minihermes("backup", str(tmp_path / "bk"), "--config", str(cfg), "--json")
        assert done.returncode == 0, done.stderr
        manifest = json.loads(done.stdout)
        assert manifest["backend"] == "postgres" and manifest["schema"] == schema
        assert {f["path"] for f in manifest["files"]} == {"postgres.dump", "credential.key"}

        new = tmp_path / "new"
        target = config(tmp_path / "new.toml", schema, new)
        refused = minihermes("restore", str(tmp_path / "bk"), "--config", str(target))
        assert refused.returncode == 1 and "must not exist yet" in refused.stderr  # the schema is there
        assert not new.exists()

        asyncio.run(drop_schema(schema))
        restored = minihermes("restore", str(tmp_path / "bk"), "--config", str(target))
        assert restored.returncode == 0, restored.stderr
        assert asyncio.run(get(schema)) == {"v": 1}
        assert (new / "credential.key").read_text() == "kept" and not (new / "postgres.dump").exists()
    finally:
        asyncio.run(drop_schema(schema))
