"""Built-in tools and the boundary for untrusted code.

- ``sandbox``: run commands and Python in an isolated child process (``run_sandboxed``, ``run_python``,
  ``isolation_report``); ``python_call``: call ``run(input) -> dict`` in an untrusted module through it.
- ``calculator``: arithmetic without eval, safe in-process.
- ``workspace``: file tools confined to a session's workspace folder.
"""
