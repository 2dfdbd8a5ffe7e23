"""The testing seam (`guideloom.workers.hooks`) on its own: nothing without the variable, the
named file's functions with it, and which variables the driver passes to its tasks."""

from __future__ import annotations

import pytest

from guideloom.workers import hooks


def test_no_variable_no_hooks(monkeypatch):
    monkeypatch.delenv(hooks.HOOKS_ENV, raising=False)
    assert all(hooks.hook(point) is None for point in hooks.POINTS)
    assert hooks.forwarded_env({}) == {}
    with pytest.raises(ValueError, match="unknown hook point 'nope'"):
        hooks.hook("nope")


def test_a_hook_file_and_its_settings(monkeypatch, tmp_path):
    path = tmp_path / "my_hooks.py"
    path.write_text("CALLS = []\n\ndef part_started(part):\n    CALLS.append(part)\n")
    monkeypatch.setenv(hooks.HOOKS_ENV, str(path))
    monkeypatch.setenv(f"{hooks.HOOKS_ENV}_SETTINGS", '{"x": 1}')
    started = hooks.hook("part_started")
    assert started is not None and hooks.hook("record_read") is None  # a point it lacks
    started(3)
    assert started.__globals__["CALLS"] == [3]
    mine = {hooks.HOOKS_ENV: str(path), f"{hooks.HOOKS_ENV}_SETTINGS": '{"x": 1}'}
    assert hooks.forwarded_env({}) == mine  # workers of a Ray someone else started lack them
    assert hooks.forwarded_env(mine) == {}  # a job submitted with them has them
    assert hooks.forwarded_env(None) == {}  # a Ray this process started inherits them
