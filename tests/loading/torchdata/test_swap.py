"""The vendored torchdata tests really run against the class conftest.py names, and only they do."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import torchdata.stateful_dataloader as torchdata_package
from torchdata_swap import TORCHDATA_CLASS, VENDORED, class_under_test, swapped

import guideloom


def _vendored_module() -> ModuleType:
    """The module pytest collected, or (when only this file runs) one imported as pytest does."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == str(VENDORED):
            return module
    spec = importlib.util.spec_from_file_location("vendored_test_state_dict", VENDORED)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with swapped():
        spec.loader.exec_module(module)
    return module


def test_the_vendored_module_tests_the_chosen_class_and_nothing_else_sees_it() -> None:
    assert _vendored_module().StatefulDataLoader is class_under_test()
    assert torchdata_package.StatefulDataLoader is TORCHDATA_CLASS  # put back after the import
    assert issubclass(guideloom.StatefulDataLoader, TORCHDATA_CLASS)
