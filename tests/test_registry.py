"""Plug-ins by name: registered in code or found through an entry point, unknown names named."""

from __future__ import annotations

from importlib import metadata

import pytest

from guideloom.errors import PluginError
from guideloom.registry import Registry


def test_register_get_and_names():
    reg: Registry[type] = Registry("guideloom.test-nothing", "widget", hint="widgets")
    reg.register("a", int)

    @reg.registering("b")
    class B:
        pass

    assert reg.get("a") is int and reg.get("b") is B
    assert reg.names() == ["a", "b"] and "a" in reg and "c" not in reg
    with pytest.raises(PluginError, match="already registered"):
        reg.register("a", float)
    reg.register("a", float, replace=True)
    assert reg.get("a") is float


def test_unknown_name_lists_the_known_ones_and_the_fix():
    reg: Registry[type] = Registry("guideloom.test-nothing", "widget", hint="widgets")
    reg.register("known", int)
    with pytest.raises(PluginError) as err:
        reg.get("nope")
    text = str(err.value)
    assert "unknown widget 'nope'" in text and "known: known" in text
    assert "widgets.register('nope', ...)" in text and "guideloom.test-nothing" in text
    assert isinstance(err.value, LookupError)


def test_entry_points_are_loaded_by_name_only_when_asked(monkeypatch):
    loaded = []

    class FakeEntryPoint:
        def __init__(self, name: str, value: str) -> None:
            self.name, self.value = name, value

        def load(self):
            loaded.append(self.name)
            if self.name == "broken":
                raise ImportError("no module named nowhere")
            return complex

    def fake_entry_points(*, group: str):
        assert group == "guideloom.test-group"
        return [FakeEntryPoint("plugged", "pkg.mod:Thing"), FakeEntryPoint("broken", "nowhere:X")]

    monkeypatch.setattr(metadata, "entry_points", fake_entry_points)
    reg: Registry[type] = Registry("guideloom.test-group", "widget")
    assert reg.names() == ["broken", "plugged"] and loaded == []
    assert reg.get("plugged") is complex and loaded == ["plugged"]
    with pytest.raises(PluginError, match="failed to import: ImportError: no module named nowhere"):
        reg.get("broken")
