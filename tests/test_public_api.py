"""The public API is small, explicit and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import guideloom


def test_all_is_sorted_and_complete():
    assert list(guideloom.__all__) == sorted(guideloom.__all__)
    public = {
        n
        for n, obj in vars(guideloom).items()
        if isinstance(obj, type) and obj.__module__.startswith("guideloom") and not n.startswith("_")
    }
    assert public <= set(guideloom.__all__), public - set(guideloom.__all__)
    for name in guideloom.__all__:
        assert getattr(guideloom, name) is not None


def test_seed_page_class_names_are_exported():
    for name in [
        "StatefulDataLoader",
        "StreamDataset",
        "DocumentDataset",
        "StreamWithMetaDataset",
        "DocumentPickleFormat",
        "DocumentStorageFormat",
        "StreamNumpyFormat",
        "StreamWithMetaStorageFormat",
        "DocumentStorage",
        "StreamStorage",
        "StreamWithMetaStorage",
    ]:
        assert name in guideloom.__all__


def test_import_guideloom_loads_neither_torch_nor_ray():
    code = (
        "import sys, guideloom, guideloom.cli\n"
        "from guideloom import StreamStorage, StreamDataset\n"
        "heavy = [m for m in ('torch', 'ray', 'torchdata') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_public_names_load_on_first_use_and_the_writing_side_leaves_the_loader_out():
    # ``import guideloom`` is a few milliseconds: no storage, manifest or loading module (nor
    # pydantic) until a name is used; a Ray ingestion worker imports the writing side only.
    code = (
        "import sys, guideloom\n"
        "early = sorted(m for m in sys.modules if m.startswith('guideloom.') or m == 'pydantic')\n"
        "import guideloom.workers.driver\n"
        "loading = sorted(m for m in sys.modules if m.startswith('guideloom.loading'))\n"
        "names = [n for n in guideloom.__all__ if getattr(guideloom, n) is None]\n"
        "missing = sorted(set(guideloom.__all__) - set(dir(guideloom)))\n"
        "print(early, loading, names, missing, guideloom.open.__name__, sep='|')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    early, loading, unresolved, missing, opened = out.stdout.strip().split("|")
    assert early == "['guideloom._version', 'guideloom.errors']", out.stdout
    assert loading == "[]", loading
    assert unresolved == "[]" and missing == "[]", out.stdout
    assert opened == "open_data"


def test_loader_is_loaded_lazily():
    code = (
        "import sys, guideloom\n"
        "assert 'torch' not in sys.modules\n"
        "loader = guideloom.StatefulDataLoader\n"
        "import torchdata.stateful_dataloader as t\n"
        "assert issubclass(loader, t.StatefulDataLoader)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
