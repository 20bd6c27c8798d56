"""Encryption at rest for the SQLite store: where its key comes from, and the connections that use it.

A key is configured in one of three ways; the first that is set wins:

- ``encryption_key_file``: a store option (``[node.backend_options]``), a file outside the data directory
  holding the key (surrounding white space ignored);
- ``encryption_key_provider``: a store option, ``"package.module:callable"``, called with no arguments at
  every open, returning the key (``bytes`` or ``str``): a hook for a KMS or a secrets manager;
- the environment variable ``MINIHERMES_DB_KEY``.

None set: the store is plain SQLite through the standard library's ``sqlite3``, as before. Set: every
connection goes through SQLCipher (the ``sqlcipher3`` package: SQLite 3.53 with SQLCipher 4, AES-256 in CBC
mode with an HMAC per page), which encrypts every page of the database and of its WAL; the blobs, the
full-text indexes and the journal are pages of that file. The key is 64 hex digits (32 bytes, SQLCipher's raw
key: no derivation), or any other text of at least ``MIN_PASSPHRASE`` characters, a passphrase stretched
with SQLCipher 4's KDF (PBKDF2-HMAC-SHA512, 256,000 iterations, salted by the file's random salt). We run
that derivation once per store open (``hashlib``; about 0.3 s) and hand every connection the raw key it
yields, which is what SQLCipher would derive itself, on every connection it opens. A provider may also return
32 raw bytes; a file is always text.

Cipher settings (``CipherProfile``): the HMAC of each page is most of what encryption costs a page, so a
new file gets the cheaper one on the machine that makes it (``CURRENT``): HMAC-SHA256 (``SHA256_PAGES``)
where the CPU computes SHA-256 in hardware (x86-64 SHA extensions, ARMv8 SHA2: a third cheaper than
SHA-512), else SQLCipher 4's default HMAC-SHA512 (``SQLCIPHER4``; SHA-256 in software is a third dearer);
both keyed with 256 bits, either puts forging a page out of reach. Files made before 2026-11-27 have SQLCipher 4's defaults. Nothing in an
encrypted file says which, so the first connection of a store tries ``PROFILES`` in order (a wrong one fails
the HMAC check of page 1 at once) and the others reuse the one that opened it (``Keying``). A rotation keeps
the file's settings.

A wrong key, a key for a plain file and a plain open of an encrypted file are each one ``StoreKeyError`` (a
``ConfigError``: ``serve`` prints it as one line) naming the key's source, never the key.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import re
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .._errors import ConfigError
from ._errors import StoreError

ENV_VAR = "MINIHERMES_DB_KEY"
MIN_PASSPHRASE = 8
SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of a plain SQLite file; an SQLCipher file starts with its random salt instead."""
CIPHER_PACKAGE = "sqlcipher3==0.6.4"
RECORD_FILE = "key-rotation.json"
"""Beside the database: when it was last re-encrypted, and the new key's source (no secret)."""
_HEX_KEY = re.compile(r"^(?:x')?([0-9a-fA-F]{64})'?$")
SALT_BYTES = 16
"""SQLCipher's salt: the first 16 bytes of an encrypted file."""
KDF_ITERATIONS = 256_000
"""SQLCipher 4's PBKDF2-HMAC-SHA512 iterations for a passphrase (ours are the same: the file opens with the
passphrase in a stock ``sqlcipher`` shell too)."""


@dataclass(frozen=True)
class CipherProfile:
    """The SQLCipher settings a file was made with (a connection must be given them before it reads)."""

    name: str
    hmac_algorithm: str
    page_size: int

    def pragmas(self) -> tuple[str, ...]:
        return (
            f"PRAGMA cipher_hmac_algorithm = {self.hmac_algorithm}",
            f"PRAGMA cipher_page_size = {self.page_size}",
        )


SHA256_PAGES = CipherProfile("HMAC-SHA256", "HMAC_SHA256", 4096)
SQLCIPHER4 = CipherProfile("HMAC-SHA512", "HMAC_SHA512", 4096)
"""SQLCipher 4's defaults: every file encrypted before 2026-11-27."""


def sha256_in_hardware(cpuinfo: str | None = None, machine: str | None = None) -> bool:
    """Whether this CPU has SHA-256 instructions (OpenSSL uses them): the ``sha_ni`` flag (x86-64) or the
    ``sha2`` feature (ARMv8) in ``/proc/cpuinfo``; Apple silicon has them. Unknown: False."""
    machine = platform.machine().lower() if machine is None else machine
    if cpuinfo is None:
        if sys.platform == "darwin":
            return machine == "arm64"
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return False
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return "sha_ni" in flags or "sha2" in flags


CURRENT = SHA256_PAGES if sha256_in_hardware() else SQLCIPHER4
"""What a new file is made with on this machine (a file moved to another opens there all the same)."""
PROFILES = (CURRENT, *(p for p in (SHA256_PAGES, SQLCIPHER4) if p != CURRENT))


class StoreKeyError(StoreError, ConfigError):
    """The store's key is missing, unusable, or does not open the file. The message names the key's source
    (``env MINIHERMES_DB_KEY``, ``file /etc/...``, ``provider pkg.mod:fn``), never the key."""

    def __init__(self, source: str, message: str) -> None:
        ConfigError.__init__(self, source, message)


@dataclass(frozen=True)
class StoreKey:
    """A resolved key: what SQLCipher is given (``x'<hex>'`` for a raw key, else the passphrase) and where it
    came from. Its repr shows only the source."""

    secret: str = field(repr=False)
    source: str
    raw: bool

    @property
    def kind(self) -> str:
        return "raw 256-bit key" if self.raw else "passphrase (PBKDF2-HMAC-SHA512, derived once per open)"


def parse_key(value: bytes | str, source: str, *, binary: bool = False) -> StoreKey:
    """A key from a file's, a variable's or a provider's value: 64 hex digits (optionally as ``x'...'``), or
    (``binary``: a provider's bytes) exactly 32 bytes, are a raw key; other text of at least
    ``MIN_PASSPHRASE`` characters is a passphrase. A file is always text: its 32 bytes may be a passphrase."""
    if isinstance(value, bytes):
        if binary and len(value) == 32:
            return StoreKey(f"x'{value.hex()}'", source, raw=True)
        try:
            value = value.decode()
        except UnicodeDecodeError:
            raise StoreKeyError(
                source, "the key is not text (a provider may return exactly 32 bytes)"
            ) from None
    if not isinstance(value, str):
        raise StoreKeyError(source, f"expected the key as bytes or str, got {type(value).__name__}")
    text = value.strip()
    match = _HEX_KEY.match(text)
    if match:
        return StoreKey(f"x'{match.group(1).lower()}'", source, raw=True)
    if len(text) < MIN_PASSPHRASE:
        raise StoreKeyError(
            source,
            f"the key is empty or too short: give 64 hex digits (e.g. `openssl rand -hex 32`) or a passphrase "
            f"of at least {MIN_PASSPHRASE} characters",
        )
    if "\x00" in text:
        raise StoreKeyError(source, "the passphrase contains a NUL character")
    return StoreKey(text, source, raw=False)


def check_key_file(key_file: str | os.PathLike[str], data_dir: Path) -> Path:
    """The key file's absolute path; refused inside the data directory (a copy of the directory would carry
    its own key)."""
    path = Path(key_file).expanduser()
    source = f"file {path}"
    resolved, folder = path.resolve(), data_dir.resolve()
    if resolved == folder or folder in resolved.parents:
        raise StoreKeyError(
            source,
            f"the key file is inside the data directory {folder}: keep it elsewhere (a backup or a copy of the "
            "data directory must not carry its key)",
        )
    return resolved


def load_provider(spec: str) -> Any:
    """The callable named ``package.module:callable`` (or ``package.module.callable``)."""
    source = f"provider {spec}"
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise StoreKeyError(source, "expected 'package.module:callable'")
    try:
        provider = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as e:
        raise StoreKeyError(source, f"cannot load it: {e}") from None
    if not callable(provider):
        raise StoreKeyError(source, "not a callable")
    return provider


def check_options(key_file: Any, key_provider: Any) -> None:
    """Construction-time checks (no I/O): types, and at most one of the two options."""
    for name, value in (("encryption_key_file", key_file), ("encryption_key_provider", key_provider)):
        if value is not None and not isinstance(value, str | os.PathLike):
            raise ValueError(f"{name} must be a path or a string, got {type(value).__name__}")
    if key_file is not None and key_provider is not None:
        raise ValueError("give one of encryption_key_file and encryption_key_provider, not both")
    if isinstance(key_provider, str):
        module_name, sep, attribute = key_provider.partition(":")
        if not (module_name and (attribute if sep else "." in module_name)):
            raise ValueError(
                f"encryption_key_provider must be 'package.module:callable', got {key_provider!r}"
            )


def resolve_key(
    *,
    key_file: str | os.PathLike[str] | None,
    key_provider: str | None,
    data_dir: Path,
    environ: dict[str, str] | os._Environ[str] | None = None,
) -> StoreKey | None:
    """The configured key (reads the file, calls the provider, or reads the environment), or None."""
    if key_file is not None:
        path = check_key_file(key_file, data_dir)
        try:
            return parse_key(path.read_bytes(), f"file {path}")
        except OSError as e:
            raise StoreKeyError(f"file {path}", f"cannot read the key file: {e.strerror or e}") from None
    if key_provider is not None:
        source = f"provider {key_provider}"
        provider = load_provider(key_provider)
        try:
            value = provider()
        except Exception as e:
            raise StoreKeyError(source, f"the key provider failed: {type(e).__name__}: {e}") from None
        if value is None:
            raise StoreKeyError(source, "the key provider returned no key")
        return parse_key(value, source, binary=True)
    env = os.environ if environ is None else environ
    value = env.get(ENV_VAR)
    if value is None:
        return None
    return parse_key(value, f"env {ENV_VAR}")


def cipher_module() -> ModuleType:
    """``sqlcipher3``, or a ``StoreKeyError`` saying how to get it."""
    try:
        return importlib.import_module("sqlcipher3")
    except ImportError as e:
        raise StoreKeyError(
            "encryption",
            f"a key is configured but SQLCipher is not installed ({e}): `pip install {CIPHER_PACKAGE}` "
            "(a dependency of MiniHermes: wheels for Linux x86_64 and aarch64, macOS and Windows)",
        ) from None


def db_errors(key: StoreKey | None) -> tuple[type[Exception], ...]:
    """The error classes of the driver a store with ``key`` uses (sqlite3's and SQLCipher's differ)."""
    if key is None:
        return (sqlite3.Error,)
    return (sqlite3.Error, cipher_module().Error)


def cipher_versions() -> tuple[str, str]:
    """SQLCipher's and its SQLite's versions, e.g. ``("4.19.0 community", "3.53.4")``."""
    driver = cipher_module()
    conn = driver.connect(":memory:")
    try:
        version = str(conn.execute("PRAGMA cipher_version").fetchone()[0])
    finally:
        conn.close()
    return version, str(driver.sqlite_version)


def apply_key(conn: Any, secret: str, profile: CipherProfile) -> None:
    """Key a fresh SQLCipher connection (before its first statement) with ``secret`` (a ``Keying``'s) and
    the file's settings. SQLCipher's own log of a failed page (stderr) is silenced: the caller reports a
    wrong key as one line."""
    conn.execute("PRAGMA cipher_log_level = NONE")
    conn.set_key(secret)
    for pragma in profile.pragmas():
        conn.execute(pragma)


_derived: dict[tuple[str, bytes], bytes] = {}
_derived_lock = threading.Lock()


def _derive(passphrase: str, salt: bytes) -> bytes:
    """SQLCipher 4's key for ``passphrase`` on a file salted with ``salt``; computed once per process (a
    reopen of the file reuses it), under a lock so that connections opening at once do not each run it."""
    with _derived_lock:
        key = _derived.get((passphrase, salt))
        if key is None:
            key = hashlib.pbkdf2_hmac("sha512", passphrase.encode(), salt, KDF_ITERATIONS, 32)
            if len(_derived) >= 8:  # a few stores and rotations per process; old keys are not kept
                _derived.clear()
            _derived[(passphrase, salt)] = key
        return key


def file_salt(path: Path) -> bytes | None:
    """The salt of the encrypted file ``path``; None when there is no file, an empty one or a plain one."""
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return None
    if len(head) < SALT_BYTES or head == SQLITE_MAGIC:
        return None
    return head[:SALT_BYTES]


class Keying:
    """How every connection of one store is keyed: SQLCipher's raw key for the file (a passphrase is derived
    once, here, not by SQLCipher at each connection) and the file's ``CipherProfile``, found by the first
    connection that opens it and reused by the others."""

    def __init__(self, key: StoreKey, path: Path, profile: CipherProfile | None = None) -> None:
        self.key, self.path = key, path
        self.profile = profile
        self._secret: str | None = None

    def secret(self) -> str:
        """What ``set_key`` is given: ``x'<key>'``, or for a new file ``x'<key><salt>'`` (the salt SQLCipher
        then writes, so that the key we derived is the one SQLCipher would)."""
        if self._secret is None:
            self._secret = self._for_file()
        return self._secret

    def _for_file(self) -> str:
        if self.key.raw:
            return self.key.secret
        salt = file_salt(self.path)
        if salt is not None:
            return f"x'{_derive(self.key.secret, salt).hex()}'"
        if Path(f"{self.path}-wal").exists() and file_is_plain(self.path) is None:
            # A file whose first page is still only in its WAL: SQLCipher reads the salt from there itself.
            return self.key.secret
        salt = os.urandom(SALT_BYTES)
        return f"x'{_derive(self.key.secret, salt).hex()}{salt.hex()}'"

    def candidates(self) -> tuple[CipherProfile, ...]:
        """The settings to try on a new connection: the file's once known, else every known in turn."""
        return PROFILES if self.profile is None else (self.profile,)

    def rekeyed(self, key: StoreKey) -> Keying:
        """The keying of the same file under ``key`` (same salt, same settings: what ``PRAGMA rekey`` keeps)."""
        new = Keying(key, self.path, self.profile)
        if not key.raw:
            salt = file_salt(self.path)
            if salt is None:
                raise StoreKeyError(key.source, f"{self.path} has no salt to derive the new key with")
            new._secret = f"x'{_derive(key.secret, salt).hex()}'"
        return new


def file_is_plain(path: Path) -> bool | None:
    """True: a plain SQLite file; False: something else (an SQLCipher file); None: no file or an empty one."""
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return None
    if not head:
        return None
    return head == SQLITE_MAGIC


def wrong_key(path: Path, key: StoreKey | None) -> StoreKeyError:
    """What to say when ``path`` does not open with ``key`` (None: opened without one)."""
    plain = file_is_plain(path)
    if key is None:
        return StoreKeyError(
            "encryption",
            f"{path} is encrypted (or is not an SQLite database): set its key in {ENV_VAR}, or the store "
            "option encryption_key_file or encryption_key_provider",
        )
    if plain:
        return StoreKeyError(
            key.source,
            f"{path} is not encrypted but a key is configured: unset the key, or encrypt the store with "
            "`minihermes keys rotate --new-key-file FILE` (node stopped), then configure that key",
        )
    last = last_rotation(path)
    hint = "after `minihermes keys rotate`, give the new one"
    if last is not None and last.get("key_source") != key.source:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(last.get("rotated_at") or 0)))
        hint = f"it was re-encrypted at {at} with the key from {last.get('key_source')}"
    return StoreKeyError(key.source, f"the key does not open {path}: a wrong key ({hint})")


def last_rotation(db: Path) -> dict[str, Any] | None:
    """What ``RECORD_FILE`` beside ``db`` says, if anything."""
    try:
        data = json.loads((db.parent / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
