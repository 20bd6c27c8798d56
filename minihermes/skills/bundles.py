"""Skill folders on disk and in archives, for the doors that move them (``minihermes skills import/export``
and the HTTP upload and download): read a folder within the limits, group its files into skills, write
folders and zips. Folders are the operator's machine's, never a request's: ``read_folder`` and
``write_folder`` take ``protect`` (the data dir), and the skill store itself reads archives only (its
``import_skills`` op, docs/skills.md)."""

from ._archive import check_unprotected, docs_zip, read_folder, write_folder, write_zip
from ._folders import Limits, SkillFolder, group

__all__ = [
    "Limits",
    "SkillFolder",
    "check_unprotected",
    "docs_zip",
    "group",
    "read_folder",
    "write_folder",
    "write_zip",
]
