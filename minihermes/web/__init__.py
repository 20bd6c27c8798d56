"""The web dashboard's assets (HTML, ES modules, CSS), served by the HTTP API at ``/`` and ``/static/``."""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent
"""Where ``index.html`` and the ``static`` assets live."""

__all__ = ["STATIC_DIR"]
