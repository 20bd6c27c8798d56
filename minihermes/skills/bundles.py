"""Skill folders on disk and in archives, for the doors that move them (``minihermes skills import/export``
and the HTTP upload): read a folder within the limits, group its files into skills, write folders and zips.
The skill store itself takes the grouped files through its ``import_skills`` op (docs/skills.md)."""

from ._archive import read_folder, write_zip
from ._folders import Limits, SkillFolder, group
from ._store_io import write_folder

__all__ = ["Limits", "SkillFolder", "group", "read_folder", "write_folder", "write_zip"]
