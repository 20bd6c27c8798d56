"""The cipher settings of an encrypted store (``_sqlite_keys``): a new file gets HMAC-SHA256 pages where the
CPU has SHA-256 instructions (else SQLCipher 4's HMAC-SHA512), a file made with SQLCipher 4's defaults still
opens and keeps its settings through writes and rotations, and a passphrase is stretched once per open (not
by SQLCipher at each connection) into the very key SQLCipher would derive: every file still opens with its
passphrase in a stock SQLCipher given the file's settings.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import sqlcipher3

from minihermes.runtime.store import StoreKeyError, open_store
from minihermes.runtime.store import _sqlite_keys as keys
from minihermes.runtime.store._sqlite_rotation import encrypt_plain_file

PASSPHRASE = "a long passphrase for the tests"
OTHER_PASSPHRASE = "another passphrase, rotated to"
RAW = "5f" * 32
SCOPE = ("acme", "main")


def stock_open(db: Path, secret: str, hmac: str | None) -> list[tuple[object, ...]]:
    """What a stock SQLCipher connection keyed with ``secret`` (and only given ``hmac``, if any) reads from
    the store's KV table; raises ``sqlcipher3.DatabaseError`` when that does not open the file."""
    conn = sqlcipher3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA cipher_log_level = NONE")
        conn.set_key(secret)
        if hmac is not None:
            conn.execute(f"PRAGMA cipher_hmac_algorithm = {hmac}")
        return conn.execute("SELECT key FROM kv ORDER BY key").fetchall()
    finally:
        conn.close()


def count_derivations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the PBKDF2 runs for a passphrase from now on (the process-wide cache is emptied first)."""
    calls: list[int] = []
    real = keys.hashlib.pbkdf2_hmac

    def counted(*args: object, **kw: object) -> bytes:
        calls.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    keys._derived.clear()
    monkeypatch.setattr(keys.hashlib, "pbkdf2_hmac", counted)
    return calls


async def encryption_finding(store: object) -> str:
    (finding,) = [f for f in await store.doctor() if f.name == "encryption"]  # type: ignore[attr-defined]
    assert finding.status == "ok", finding
    return str(finding.detail)


def other_hmac() -> str:
    (other,) = [p for p in keys.PROFILES if p != keys.CURRENT]
    return other.hmac_algorithm


def test_sha256_pages_where_the_cpu_has_sha256_instructions() -> None:
    x86 = "processor\t: 0\nflags\t\t: fpu sse2 avx2 aes {}\nbugs\t\t: spectre_v1\n"
    assert keys.sha256_in_hardware(x86.format("sha_ni"), "x86_64")
    assert not keys.sha256_in_hardware(
        x86.format("avx512f"), "x86_64"
    )  # e.g. Cascade Lake: SHA-512 is cheaper
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"
    assert keys.sha256_in_hardware(arm, "aarch64")
    assert not keys.sha256_in_hardware("", "x86_64")
    assert keys.PROFILES[0] == keys.CURRENT and set(keys.PROFILES) == {keys.SHA256_PAGES, keys.SQLCIPHER4}


@pytest.mark.parametrize("made_with", ["this machine", "SQLCIPHER4"])
async def test_a_new_store_uses_the_cheaper_hmac_and_derives_a_passphrase_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made_with: str
) -> None:
    if made_with == "SQLCIPHER4":  # a machine without SHA-256 instructions
        monkeypatch.setattr(keys, "CURRENT", keys.SQLCIPHER4)
        monkeypatch.setattr(keys, "PROFILES", (keys.SQLCIPHER4, keys.SHA256_PAGES))
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE)
    derivations = count_derivations(monkeypatch)
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=data, readers=4) as store:
        for i in range(20):
            await store.kv.put(SCOPE, f"k{i:02}", {"i": i})
        # Reads on every reader (each opens its own connection), interleaved with commits.
        got = await asyncio.gather(*(store.kv.get(SCOPE, f"k{i:02}") for i in range(20)))
        assert got == [{"i": i} for i in range(20)]
    assert len(derivations) == 1  # five connections, one PBKDF2 (SQLCipher's own would run five times)

    db = data / "minihermes.db"
    rows = stock_open(db, PASSPHRASE, keys.CURRENT.hmac_algorithm)  # the passphrase, SQLCipher's own KDF
    assert len(rows) == 20
    with pytest.raises(sqlcipher3.DatabaseError):
        stock_open(db, PASSPHRASE, other_hmac())

    # A second open of the file in this process reuses the derived key; doctor names the settings.
    async with open_store("sqlite", data_dir=data) as store:
        assert await store.kv.get(SCOPE, "k07") == {"i": 7}
        assert f"passphrase (PBKDF2-HMAC-SHA512, derived once per open), {keys.CURRENT.name} pages)" in (
            await encryption_finding(store)
        )
        # A rotation derives the new passphrase's key once, with the file's salt, and keeps the settings.
        await store.rotate_key(keys.parse_key(OTHER_PASSPHRASE, "test"))  # type: ignore[attr-defined]
        assert await asyncio.gather(*(store.kv.get(SCOPE, f"k{i:02}") for i in range(20))) == got
    assert len(derivations) == 2
    assert len(stock_open(db, OTHER_PASSPHRASE, keys.CURRENT.hmac_algorithm)) == 20


@pytest.mark.parametrize("secret", [PASSPHRASE, f"x'{RAW}'"], ids=["passphrase", "raw key"])
async def test_a_file_made_with_sqlcipher4_defaults_opens_and_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = data / "minihermes.db"
    legacy = sqlcipher3.connect(db, isolation_level=None)  # as the store made its files before
    legacy.set_key(secret)
    legacy.execute("PRAGMA journal_mode = WAL")
    legacy.close()
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE if secret == PASSPHRASE else RAW)
    async with open_store("sqlite", data_dir=data) as store:
        await store.kv.put(SCOPE, "old", {"v": 1})
        assert await store.kv.get(SCOPE, "old") == {"v": 1}
        new_key = keys.parse_key(OTHER_PASSPHRASE, "test")
        await store.rotate_key(new_key)  # type: ignore[attr-defined]
        await store.kv.put(SCOPE, "rotated", {"v": 2})
        assert await store.kv.get(SCOPE, "old") == {"v": 1}  # a reader reopened under the new key
    # Still SQLCipher 4's defaults, now under the new passphrase: a stock SQLCipher opens it as it is.
    assert stock_open(db, OTHER_PASSPHRASE, None) == [("old",), ("rotated",)]
    with pytest.raises(sqlcipher3.DatabaseError):
        stock_open(db, secret, None)
    monkeypatch.setenv("MINIHERMES_DB_KEY", OTHER_PASSPHRASE)
    async with open_store("sqlite", data_dir=data) as store:
        assert await store.kv.get(SCOPE, "rotated") == {"v": 2}
        assert "HMAC-SHA512 pages), SQLite" in await encryption_finding(store)
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE)
    with pytest.raises(StoreKeyError, match="the key does not open"):  # every known setting tried
        await open_store("sqlite", data_dir=data).open()


async def test_a_plain_store_is_encrypted_with_the_new_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    async with open_store("sqlite", data_dir=data) as store:
        await store.kv.put(SCOPE, "k", {"v": "plain words 4711"})
    db = data / "minihermes.db"
    await asyncio.to_thread(encrypt_plain_file, db, keys.parse_key(PASSPHRASE, "test"))
    assert b"plain words 4711" not in db.read_bytes()
    assert stock_open(db, PASSPHRASE, keys.CURRENT.hmac_algorithm) == [("k",)]
    with pytest.raises(sqlcipher3.DatabaseError):
        stock_open(db, PASSPHRASE, other_hmac())
    monkeypatch.setenv("MINIHERMES_DB_KEY", PASSPHRASE)
    async with open_store("sqlite", data_dir=data) as store:
        assert await store.kv.get(SCOPE, "k") == {"v": "plain words 4711"}
