"""The skill store's folder ops: a skill's files, reading them (``read_skill_file``, ``view_skill``),
lenient lossless import and byte-identical export. ``SkillStore`` inherits these (see ``skill_store.py``).

Storage: each file's bytes are a content-addressed blob ``skill_file/<sha256>`` (versions share unchanged
files); a version's KV meta (``skill_v:<id>:<n>``) lists the exact files it had (``files: [{path, size,
sha256, media_type, executable}]``) and its SKILL.md front matter (``head``, a blob too); the body is the version's
procedure blob, verbatim. A rollback copies an old version's list, so the files come back with it.

Trust: a skill imported by anybody is outside text until an admin approves it (``approve_skill``, or an
admin's import with ``approve``); until then ``view_skill`` says ``trusted: false`` and the agent's
``skill_view`` tool hands its body and files to the model as data, like any outside content. An import that
carries something shaped like a secret says so (``secret_warnings`` on the reply and on the record: file,
line and kind, never the secret) so that the approving admin looks before approving.

Host paths: no request names a file or folder of the server (``refuse_host_path``), whoever sends it and
through whichever door: skills come in as archives or SKILL.md texts and go out as documents (with their
files in base64); folders on disk are the operator's, read and written by ``minihermes skills import/export``
on their own machine (``cli/skills_io.py``).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from minihermes.runtime import InvalidArgument, NotFound, PermissionDenied, call, current_context

from . import _access as access
from . import _archive as archive
from . import _folders as folders
from . import _store_io as io
from ._model import USABLE
from ._store_core import Scope, SkillStoreCore, check_id, quarantined, request_origin, source_of, taint

MAX_VIEW_CHARS = 100_000
"""Text ``view_skill`` returns at most (the model's context is the limit; the rest is flagged)."""
INLINE_BODY_CHARS = 2_000
"""An imported skill with files, or a body longer than this, is loaded on demand: the prompt carries its
name and description and points at ``skill_view``."""


_HOST_PATH_HELP = {
    "import_skills": "send the skill folders as an archive instead (archive: base64 of a .zip / .skill / "
    "tarball, or its bytes to POST /api/v1/skills/import), or run 'minihermes skills import PATH' on the "
    "machine that has them",
    "export_skills": "download the skills instead (GET /api/v1/skills/export gives a zip; with_files gives "
    "every file in base64), or run 'minihermes skills export DIR' on the machine that should have them",
}


def refuse_host_path(op: str, path: object) -> None:
    """``path`` (kept in the ops' signatures: it is public contract) would name a folder on the server's
    disk, which holds the data dir (the database, ``credential.key``, every tenant's workspaces). No request
    may: the request's context, not the door it came through, decides, and no context is the operator's."""
    if path:
        raise PermissionDenied(
            f"{op}: path names a folder on the server, and no request may read or write the server's files "
            f"(folders are the operator's); {_HOST_PATH_HELP[op]}",
            op=op,
            field="path",
        )


def trusted(record: dict[str, Any]) -> bool:
    """Imported content is outside text until an admin approves the skill; a quarantined skill (derived
    from untrusted content) until its owner or an admin confirms it."""
    if quarantined(record):
        return False
    return record.get("origin") != "import" or bool(record.get("approved_by"))


def _import_origin(ours: dict[str, Any]) -> tuple[str, bool]:
    """``("import", untrusted)``: the request's stamp, and an export's own mark that it derives from
    untrusted content (our keys are hints; this one can only lower trust, never raise it)."""
    _source, untrusted = request_origin()
    return "import", untrusted or ours.get("derived_from_untrusted") is True or ours.get(
        "quarantined"
    ) is True


def file_reply(entry: dict[str, Any], data: bytes, *, max_chars: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "path": entry["path"],
        "size": len(data),
        "sha256": entry.get("sha256", ""),
        "media_type": entry.get("media_type") or folders.media_type(entry["path"]),
    }
    if folders.is_text(data):
        text = data.decode("utf-8")
        if max_chars is not None and len(text) > max_chars:
            out.update(encoding="text", content=text[:max_chars], truncated=True)
        else:
            out.update(encoding="text", content=text)
    else:
        out.update(encoding="base64", content=base64.b64encode(data).decode("ascii"))
    return out


class SkillFolderOps(SkillStoreCore):
    """Folder ops and helpers; state: ``self.limits`` (``_folders.Limits`` from the store's args)."""

    async def on_init(self, actor_id: str, args: dict[str, Any]) -> None:
        await super().on_init(actor_id, args)
        defaults = folders.Limits()
        self.limits = folders.Limits(
            max_file_bytes=int(args.get("max_file_bytes") or defaults.max_file_bytes),
            max_skill_bytes=int(args.get("max_skill_bytes") or defaults.max_skill_bytes),
            max_skill_files=int(args.get("max_skill_files") or defaults.max_skill_files),
            max_archive_bytes=int(args.get("max_import_bytes") or defaults.max_archive_bytes),
        )

    # -- reads ----------------------------------------------------------------------------------------------

    async def _folder(self, skill_id: str, version: int) -> dict[str, Any]:
        meta = await io.version_meta(self.host, skill_id, version)
        return {"head": meta.get("head", ""), "files": list(meta.get("files") or [])}

    def _visible(self, op: str, skill_id: str) -> dict[str, Any]:
        record = self._records.get(check_id(op, skill_id))
        if record is None or not (access.is_admin() or access.can_see(record, access.acting_user())):
            raise NotFound(f"{op}: no skill '{skill_id}'", op=op, field="skill_id")
        return record

    async def _skill_md(self, record: dict[str, Any], version: int) -> tuple[str, str]:
        """(head, body) of a version as kept: an imported skill's own front matter, or one made from the
        record (a learned skill)."""
        folder = await self._folder(record["skill_id"], version)
        body = await self._procedure(record["skill_id"], version)
        if folder["head"]:
            head = (await io.get_content(self.host, folder["head"])).decode("utf-8")
            return head, body
        return folders.learned_head(record["name"], record["description"]), body.strip() + "\n"

    async def _read_file(
        self, op: str, record: dict[str, Any], path: str, version: int, max_chars: int | None
    ) -> dict[str, Any]:
        wanted = version or record["version"]
        if not 1 <= wanted <= record["versions"]:
            raise InvalidArgument(f"{op}: no version {version}", op=op, field="version")
        clean = folders.safe_relpath(path)
        if clean == folders.SKILL_MD:
            head, body = await self._skill_md(record, wanted)
            data = (head + body).encode("utf-8")
            return file_reply({"path": clean, "media_type": "text/markdown"}, data, max_chars=max_chars)
        files = (await self._folder(record["skill_id"], wanted))["files"]
        entry = next((f for f in files if f["path"] == clean), None)
        if clean is None or entry is None:
            raise NotFound(f"{op}: the skill has no file '{path[:200]}'", op=op, field="path")
        data = await io.get_content(self.host, entry["sha256"])
        return file_reply(entry, data, max_chars=max_chars)

    @call(access="read")
    async def read_skill_file(self, skill_id: str, path: str, version: int = 0) -> dict[str, Any]:
        """One file of a skill (``SKILL.md`` too): ``{path, size, sha256, media_type, encoding, content}``,
        ``encoding`` ``text`` (UTF-8) or ``base64``; ``trusted`` is false for unapproved imported content."""
        op = "read_skill_file"
        record = self._visible(op, skill_id)
        out = await self._read_file(op, record, path, version, None)
        return {"status": "ok", "skill_id": skill_id, "trusted": trusted(record), **out}

    def _by_name(self, op: str, name: str) -> dict[str, Any]:
        """The skill called ``name`` (or with that id) the caller sees; usable ones first, then the caller's
        own, then the newest."""
        user = access.acting_user()
        admin = access.is_admin()
        found = [
            r
            for r in self._records.values()
            if (r["name"] == name or r["skill_id"] == name) and (admin or access.can_see(r, user))
        ]
        if not found:
            raise NotFound(f"{op}: no skill named '{name[:100]}'", op=op, field="name")
        found.sort(
            key=lambda r: (
                r["status"] not in USABLE or quarantined(r),
                not (r["scope"] == "user" and r["owner"] == user),
                -r["created_at"],
            )
        )
        return found[0]

    @call(access="read")
    async def view_skill(self, name: str, path: str = "") -> dict[str, Any]:
        """What the agent's ``skill_view`` tool shows: the skill's body, full description and file list, or
        (``path``) one of its files. ``trusted`` false: unapproved imported content (show it as data)."""
        op = "view_skill"
        record = self._by_name(op, name)
        base = {
            "status": "ok",
            "skill_id": record["skill_id"],
            "name": record["name"],
            "version": record["version"],
            "trusted": trusted(record),
        }
        if path:
            return {**base, **(await self._read_file(op, record, path, 0, MAX_VIEW_CHARS))}
        head, body = await self._skill_md(record, record["version"])
        _, yaml_text, _ = folders.split(head)
        front = folders._front(yaml_text, []) if yaml_text else {}
        description = front.get("description") if isinstance(front.get("description"), str) else None
        files = (await self._folder(record["skill_id"], record["version"]))["files"]
        out = {
            **base,
            "description": (description or record["description"]).strip(),
            "body": body[:MAX_VIEW_CHARS],
            "files": [{"path": f["path"], "size": f["size"]} for f in files],
        }
        if len(body) > MAX_VIEW_CHARS:
            out["truncated"] = True
        return out

    async def _prompt_procedure(self, record: dict[str, Any]) -> str:
        """What the prompt carries of a matched skill: a learned (or short, file-less imported) procedure
        whole; for a folder skill, a pointer to ``skill_view`` (its body and files are read on demand)."""
        text = await self._procedure(record["skill_id"], record["version"])
        if record.get("origin") != "import":
            return text
        if not record.get("file_count") and len(text) <= INLINE_BODY_CHARS:
            return text.strip()
        files = record.get("file_count", 0)
        return f'(Loaded on demand: call skill_view with name "{record["name"]}" for the instructions' + (
            f"; it has {files} files, readable with skill_view's path)" if files else ")"
        )

    # -- import -----------------------------------------------------------------------------------------

    async def _collect(
        self, op: str, documents: list[str], archive_b64: str
    ) -> tuple[list[folders.SkillFolder], list[dict[str, str]], list[dict[str, str]]]:
        """The skill folders to import, refusals and warnings, from the archive and the documents (both in
        the request: nothing is read from the server's disk)."""
        found: list[folders.SkillFolder] = []
        refused: list[dict[str, str]] = []
        warnings: list[dict[str, str]] = []

        def take(read: archive.Read, lone_name: str = "") -> None:
            entries, bad, runnable = read
            skills, stray = folders.group(entries, bad, refused, lone_name=lone_name, executable=runnable)
            found.extend(skills)
            warnings.extend({"skill": "", "message": w} for w in stray)

        if archive_b64:
            try:
                data = base64.b64decode(archive_b64, validate=True)
            except ValueError:
                raise InvalidArgument(f"{op}: archive must be base64", op=op, field="archive") from None
            take(await asyncio.to_thread(archive.read_archive, op, data, self.limits))
        for text in documents:
            if len(text) > self.limits.max_file_bytes:
                raise InvalidArgument(f"{op}: a document is over {self.limits.max_file_bytes} bytes", op=op)
            found.append(folders.SkillFolder(folder="", skill_md=text.encode("utf-8")))
        if len(found) > io.MAX_IMPORT:
            raise InvalidArgument(f"{op}: at most {io.MAX_IMPORT} skills at once", op=op)
        return found, refused, warnings

    async def _import_folders(
        self,
        op: str,
        path: str,
        documents: list[str],
        archive_b64: str,
        scope: Scope,
        approve: bool,
    ) -> dict[str, Any]:
        refuse_host_path(op, path)
        access.require_writer(op)
        if approve:
            access.require_admin(op)  # users import candidates; only admins approve
        if not access.is_admin():
            scope = "user"
        found, refused, warnings = await self._collect(op, documents, archive_b64)
        imported = []
        for item in found:
            label = item.folder or "(document)"
            try:
                parsed = folders.parse(item)
            except folders.Refused as e:
                refused.append({"skill": label, "path": folders.SKILL_MD, "reason": e.reason})
                continue
            folders.check_files(parsed, self.limits)
            refused.extend({"skill": parsed.name, **r} for r in parsed.refused)
            warnings.extend({"skill": parsed.name, "message": w} for w in parsed.warnings)
            secrets = await asyncio.to_thread(folders.find_secrets, parsed)
            warnings.extend({"skill": parsed.name, "message": _secret_warning(s)} for s in secrets)
            imported.append(await self._import_parsed(parsed, scope, approve, warnings, secrets))
        if not imported and refused:
            first = refused[0]
            raise InvalidArgument(f"{op}: {first['skill']}: {first['path']}: {first['reason']}", op=op)
        return {
            "status": "ok",
            "imported": imported,
            "count": len(imported),
            "refused": refused,
            "warnings": warnings,
        }

    def _import_target(
        self, p: folders.ParsedSkill, scope: Scope, principal: str, warnings: list[dict[str, str]]
    ) -> dict[str, Any] | None:
        """The skill an imported folder is a version of, or None (a new skill). Our ``id`` key (an export
        from this store) finds it when it has the same name and the caller may change it: their own
        user-scoped skill, or, for an admin, any of the tenant's. Otherwise the name within the caller's
        scope decides. The other keys (owner, scope, status, origin) are never taken from the file."""
        hint = str(p.ours.get("id") or "")
        hinted = self._records.get(hint) if hint else None
        if hinted is not None and hinted["name"] == p.name:
            if access.is_admin() or (hinted["scope"] == "user" and hinted["owner"] == principal):
                return hinted
            warnings.append(
                {
                    "skill": p.name,
                    "message": "its minihermes keys name a skill that is not yours to change; "
                    "imported as your own",
                }
            )
        return next(
            (
                r
                for r in self._records.values()
                if r["name"] == p.name
                and r["scope"] == scope
                and (scope == "tenant" or r["owner"] == principal)
            ),
            None,
        )

    async def _free_id(self, hint: Any) -> str:
        """The id our keys carried, for a new skill, when it is a valid id never used in this store (an
        export imported elsewhere keeps its id); else "" (a fresh one)."""
        if not isinstance(hint, str) or not hint or hint in self._records:
            return ""
        try:
            check_id("import_skills", hint)
        except InvalidArgument:
            return ""
        return "" if await io.versions(self.host, hint) else hint

    async def _import_parsed(
        self,
        p: folders.ParsedSkill,
        scope: Scope,
        approve: bool,
        warnings: list[dict[str, str]],
        secrets: list[dict[str, Any]],
    ) -> dict[str, Any]:
        principal = current_context().principal
        head_sha = await io.put_content(self.host, p.head.encode("utf-8"), "text/markdown") if p.head else ""
        manifest: list[dict[str, Any]] = []
        for rel in sorted(p.files):
            data = p.files[rel]
            kind = folders.media_type(rel)
            manifest.append(
                {
                    "path": rel,
                    "size": len(data),
                    "sha256": await io.put_content(self.host, data, kind),
                    "media_type": kind,
                    "executable": rel in p.executable,
                }
            )
        folder = {"head": head_sha, "files": manifest}
        extra: dict[str, Any] = {
            "origin": "import",
            "folder": p.folder.rsplit("/", 1)[-1],
            "file_count": len(manifest),
            "files_bytes": sum(f["size"] for f in manifest),
            "allowed_tools": p.allowed_tools,
            "license": p.license[:200],
        }
        source, untrusted = _import_origin(p.ours)
        same = self._import_target(p, scope, principal, warnings)
        if same is not None:
            record = dict(same)
            if await self._content_hash(same) == folders.content_hash(p.head, p.body, manifest):
                if approve and not record.get("approved_by") and record.get("origin") == "import":
                    await self._approve_import(record)
                return self._import_reply(record, unchanged=True, secrets=secrets)
            record.update(
                description=p.description,
                triggers=p.triggers,
                tags=p.tags,
                updated_at=self.host.now(),
                **extra,
            )
            previous = record["status"]
            held = taint(record, source, untrusted, self.host.now())
            await self._write_version(record, p.body, "imported", folder=folder)
            _flag_secrets(record, secrets)
            if approve:
                record.update(approved_by=principal, approved_tools=list(record["tools"]), status="active")
            else:  # new outside content: a candidate again until an admin approves it
                if record["status"] in USABLE:
                    record["was_usable"] = True
                record.update(approved_by="", approved_tools=[], status="candidate")
            record["status_changed_at"] = self.host.now()
            await self._save(record, previous_status=previous)
            self._event("skill_imported", record, _imported_detail(record, secrets))
            if held:
                self._event("skill_quarantined", record, f"provenance={source} (imported)")
            return self._import_reply(record, secrets=secrets)
        fields = {
            "name": p.name,
            "description": p.description,
            "procedure": p.body,
            "triggers": p.triggers,
            "tags": p.tags,
        }
        record = self._new_record(
            fields,
            owner=principal,
            provenance={"session_id": "", "user_id": principal, "turn_id": ""},
            source=source,
            untrusted=untrusted,
            skill_id=await self._free_id(p.ours.get("id")),
        )
        record.update(scope=scope, **extra)
        if approve:
            record.update(status="active", approved_by=principal)
        await self._write_version(record, p.body, "imported", first=True, folder=folder)
        if approve:
            record["approved_tools"] = list(record["tools"])
        _flag_secrets(record, secrets)
        await self._save(record, previous_status=None)
        self._event("skill_imported", record, f"{_imported_detail(record, secrets)} approved={approve}")
        if untrusted:
            self._event("skill_quarantined", record, f"provenance={source} (imported)")
        self.host.incr_counter("skills_imported_total")
        return self._import_reply(record, secrets=secrets)

    async def _approve_import(self, record: dict[str, Any]) -> None:
        record["approved_by"] = current_context().principal
        record["approved_tools"] = list(record["tools"])
        previous = record["status"]
        if previous == "candidate":
            record["status"] = "active"
            record["status_changed_at"] = self.host.now()
        await self._save(record, previous_status=previous, reindex=previous != record["status"])
        self._event("skill_approved", record, f"by={record['approved_by']} (import)")

    def _import_reply(
        self, record: dict[str, Any], *, unchanged: bool = False, secrets: list[dict[str, Any]]
    ) -> dict[str, Any]:
        out = {
            "skill_id": record["skill_id"],
            "name": record["name"],
            "version": record["version"],
            "status": record["status"],
            "files": record.get("file_count", 0),
            "scope": record["scope"],
            "unchanged": unchanged,
        }
        if quarantined(record):
            out["quarantined"] = True
        if secrets:
            out["secret_warnings"] = secrets
        return out

    async def _content_hash(self, record: dict[str, Any]) -> str:
        """``content_hash`` of the record's current version (SKILL.md as kept, files and their modes)."""
        head, body = await self._skill_md(record, record["version"])
        files = (await self._folder(record["skill_id"], record["version"]))["files"]
        return folders.content_hash(head, body, files)

    # -- export -----------------------------------------------------------------------------------------

    async def _export_docs(self, listed: list[dict[str, Any]], with_files: bool) -> list[dict[str, Any]]:
        """Each skill as its SKILL.md (as kept, plus our one line of keys) and, ``with_files``, its files."""
        docs = []
        for view in listed:
            record = self._records[view["skill_id"]]
            head, body = await self._skill_md(record, record["version"])
            files = (await self._folder(record["skill_id"], record["version"]))["files"]
            ours = {  # id/owner/scope/origin/hash: hints an import matches this skill by, never trusted
                "id": record["skill_id"],
                "owner": record["owner"],
                "scope": record["scope"],
                "origin": record.get("origin") or "learned",
                "hash": folders.content_hash(head, body, files),
                "status": record["status"],
                "tags": record["tags"],
                "triggers": record["triggers"],
                "version": record["version"],
                # Its trust travels with it: an import of a held skill is held again (``_import_origin``).
                "provenance": source_of(record),
                "derived_from_untrusted": bool(record.get("derived_from_untrusted")),
                "quarantined": quarantined(record),
            }
            doc: dict[str, Any] = {
                "name": record["name"],
                "folder": record.get("folder") or "",
                "skill_md": folders.render(head, body, ours),
            }
            if with_files:
                doc["files"] = []
                doc["file_bytes"] = {}
                for entry in files:
                    data = await io.get_content(self.host, entry["sha256"])
                    doc["file_bytes"][entry["path"]] = data
                    doc["files"].append(
                        {
                            "path": entry["path"],
                            "size": entry["size"],
                            "sha256": entry["sha256"],
                            "executable": bool(entry.get("executable")),
                            "data": base64.b64encode(data).decode("ascii"),
                        }
                    )
            docs.append(doc)
        return docs


def _secret_warning(finding: dict[str, Any]) -> str:
    return (
        f"{finding['path']} line {finding['line']}: something shaped like a secret ({finding['kind']}); "
        "it is kept as written: check it before approving the skill, and rotate it if it is real"
    )


def _flag_secrets(record: dict[str, Any], secrets: list[dict[str, Any]]) -> None:
    """What the approving admin sees on the candidate (``get_skill``, the dashboard): the findings of the
    version just imported, or nothing when it has none."""
    if secrets:
        record["secret_warnings"] = [{**s, "version": record["version"]} for s in secrets]
    else:
        record.pop("secret_warnings", None)


def _imported_detail(record: dict[str, Any], secrets: list[dict[str, Any]]) -> str:
    detail = f"name={record['name']} version={record['version']}"
    return f"{detail} secret_warnings={len(secrets)}" if secrets else detail
