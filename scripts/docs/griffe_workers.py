"""A Griffe extension for the API reference: the folder ``workers/`` as ``guideloom.workers``.

The repository keeps the Ray ingestion package in the top-level folder ``workers/``, installed
as ``guideloom.workers`` (``[tool.setuptools.package-dir]`` in ``pyproject.toml``). Griffe finds
packages by folder, so in a checkout without the ``guideloom/workers -> ../workers`` link it
would not find ``guideloom.workers``; this extension loads ``workers/`` statically (nothing is
imported, so Ray is not either) and attaches it to ``guideloom``. Used by mkdocs.yml.
"""

from __future__ import annotations

from typing import Any

import griffe


class WorkersAsSubpackage(griffe.Extension):
    """Attach the top-level ``workers`` package to ``guideloom`` as its ``workers`` member."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "guideloom" or "workers" in pkg.members:
            return  # not ours, or the link is there and Griffe found it by itself
        workers = loader.load("workers", submodules=True, try_relative_path=False)
        if isinstance(workers, griffe.Module):
            pkg.set_member("workers", workers)
