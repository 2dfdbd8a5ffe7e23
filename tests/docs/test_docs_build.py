"""The documentation builds offline with `mkdocs build --strict` (warnings, including broken
internal links and anchors, are errors) and the built site needs nothing from the network."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from docs_helpers import DOCS, EXAMPLES, REPO, build_site


def _copy_with_page(tmp_path: Path, text: str) -> Path:
    """A copy of docs/ plus one extra page, and a config that builds it (from the repo root)."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    (docs / "probe.md").write_text(text, encoding="utf-8")
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace('paths: ["."]', f'paths: ["{REPO}"]')
    # Griffe extensions given as paths are relative to the config file: point them at the repo.
    config = config.replace("- scripts/docs/", f"- {REPO}/scripts/docs/")
    config = config.replace(
        "  - API reference: reference/api.md", "  - API reference: reference/api.md\n  - Probe: probe.md"
    )
    path = tmp_path / "mkdocs.yml"
    path.write_text(config, encoding="utf-8")
    return path


BAD_LINKS = ["does-not-exist.md", "index.md#no-such-anchor", "/absolute.html"]


def test_strict_build_refuses_each_bad_link(tmp_path: Path) -> None:
    # One build of a page holding every kind of bad link: a strict build warns about each one
    # (then fails), so each link must have a warning line of its own.
    page = "# Probe\n\n" + "".join(f"[link {k}]({link})\n\n" for k, link in enumerate(BAD_LINKS))
    result = build_site(tmp_path / "site", _copy_with_page(tmp_path, page))
    assert result.returncode != 0, "bad links were accepted"
    warnings = [line for line in (result.stdout + result.stderr).splitlines() if "WARNING" in line]
    for link in BAD_LINKS:
        named = [w for w in warnings if link.split("#")[-1].lstrip("/") in w]
        assert named, f"no warning names the link to {link}: {warnings}"


def test_strict_build_accepts_the_probe_copy(tmp_path: Path) -> None:
    # The copy itself builds, so the failures above are the links' fault.
    config = _copy_with_page(tmp_path, "# Probe\n\n[home](index.md)\n")
    result = build_site(tmp_path / "site", config)
    assert result.returncode == 0, result.stdout + result.stderr


def test_site_builds_with_every_page(built_site: Path) -> None:
    for md in DOCS.rglob("*.md"):
        html = built_site / md.relative_to(DOCS).with_suffix(".html")
        assert html.exists(), f"{md.relative_to(DOCS)} was not built"


def test_no_resource_is_loaded_from_the_network(built_site: Path) -> None:
    # Links to other sites are fine; scripts, styles, images and fonts must ship with the site.
    loaded = re.compile(
        r"<(?:script|img|iframe|source)\b[^>]*\bsrc=\"(https?:)?//|"
        r"<link\b[^>]*\bhref=\"(https?:)?//",
        re.I,
    )
    for html in built_site.rglob("*.html"):
        text = html.read_text(encoding="utf-8")
        match = loaded.search(text)
        assert match is None, (
            f"{html.relative_to(built_site)} loads {text[match.start() : match.start() + 120]}"
        )
    for css in built_site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", css.read_text(encoding="utf-8")), css


def test_api_reference_is_generated_from_docstrings(built_site: Path) -> None:
    html = (built_site / "reference" / "api.html").read_text(encoding="utf-8")
    for name in [
        "StreamStorage",
        "StreamNumpyFormat",
        "StreamDataset",
        "DocumentStorageFormat",
        "StreamWithMetaStorageFormat",
        "StatefulDataLoader",
    ]:
        assert f'id="guideloom.{name}"' in html, f"{name} is missing from the API reference"
    assert "Subclasses implement" in html  # a sentence from DocumentStorageFormat's docstring


# The most used methods: the browser test looks for them on the rendered page too.
MOST_USED = ["writer", "commit", "part_complete", "verify", "delete", "refresh", "read_windows"]


def _public_methods() -> dict[str, list[str]]:
    """Every public class of `guideloom.__all__`: its public members defined in GuideLoom."""
    import inspect

    import guideloom

    found: dict[str, list[str]] = {}
    for name in guideloom.__all__:
        obj = getattr(guideloom, name)
        if not inspect.isclass(obj) or issubclass(obj, BaseException) or name == "Manifest":
            continue
        members = set()
        for klass in obj.__mro__:
            if not klass.__module__.startswith("guideloom"):
                continue
            members |= {m for m in vars(klass) if not m.startswith("_") and callable(getattr(obj, m, None))}
        found[name] = sorted(members)
    return found


def test_api_reference_lists_every_public_method(built_site: Path) -> None:
    html = (built_site / "reference" / "api.html").read_text(encoding="utf-8")
    missing = [
        f"{cls}.{method}"
        for cls, methods in _public_methods().items()
        for method in methods
        if f'id="guideloom.{cls}.{method}"' not in html
    ]
    assert not missing, f"public methods missing from the API reference: {missing}"
    for method in MOST_USED:
        cls = "StreamDataset" if method == "read_windows" else "StreamStorage"
        assert f'id="guideloom.{cls}.{method}"' in html, method
    assert 'id="guideloom.storage.writer.Writer.append"' in html


def test_api_reference_renders_docstrings(built_site: Path) -> None:
    html = (built_site / "reference" / "api.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", html)
    roles = re.findall(r":(?:class|meth|mod|func|attr|exc|obj|data):`?", text)
    assert not roles, f"Sphinx roles left unrendered in the API reference: {roles[:5]}"
    # Private bases are not shown, and parameters come as tables with their types and defaults.
    for private in ("_View", "_Windows", "guideloom.storage.base.Storage"):
        assert private not in text, f"{private} shows in the API reference"
    assert "Parameters:" in text and "Raises:" in text
    assert "DatasetExistsError" in text and "overwrite" in text  # writer's Raises and Args
    assert "shard_size: int = DEFAULT_SHARD_SIZE" in text  # signatures with types and defaults


def _reference_sections(html: str) -> dict[str, tuple[str, str]]:
    """Every object of the API reference: `{id: (kind, html)}`, the html running from its heading
    to the next object's heading (so a class's part holds its own docstring, not its members')."""
    heads = list(re.finditer(r'<h\d id="(guideloom\.[^"]+)"[^>]*>(.*?)</h\d>', html, re.S))
    sections = {}
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(html)
        kind = re.search(r"doc-symbol-(method|function|class|attribute|module)\b", head[2])
        sections[head[1]] = (kind[1] if kind else "?", html[head.start() : end])
    return sections


def _titles(section: str) -> list[str]:
    return re.findall(r'doc-section-title">([^<]+):<', section)


def _parameters_shown(section: str) -> str:
    """What the rendered signature has between its parentheses ('' for none)."""
    import html as html_lib

    match = re.search(r'<div class="doc-signature[^"]*">(.*?)</div>', section, re.S)
    text = html_lib.unescape(re.sub(r"<[^>]+>", "", match[1])) if match else ""
    return text[text.index("(") + 1 : text.rindex(")")].strip() if "(" in text else ""


def test_api_reference_documents_every_parameter(built_site: Path) -> None:
    # A function, method or class (its constructor) whose signature has parameters shows a
    # parameter table (a dataclass's fields may come as its Attributes table instead).
    sections = _reference_sections((built_site / "reference" / "api.html").read_text(encoding="utf-8"))
    routines = {i: s for i, (kind, s) in sections.items() if kind in ("function", "method", "class")}
    assert len(routines) > 100, f"only {len(routines)} functions, methods and classes found"
    missing = [
        i
        for i, s in routines.items()
        if _parameters_shown(s)
        and "Parameters" not in _titles(s)
        and not (sections[i][0] == "class" and "Attributes" in _titles(s))
    ]
    assert not missing, f"API reference entries with parameters but no parameter table: {missing}"
    for dunder in ("__len__", "__getitem__", "__getitems__"):
        for view in ("DocumentDataset", "StreamDataset", "StreamWithMetaDataset"):
            assert f"guideloom.{view}.{dunder}" in sections, f"{view}.{dunder} is not in the reference"
    for name in (
        "ingest.ingest_dataset",
        "ingest.IngestResult",
        "ingest.IngestCancelled",
        "config.IngestConfig",
    ):
        assert f"guideloom.workers.{name}" in sections, f"guideloom.workers.{name} is not in the reference"


# Where the code raises a GuideLoomError on purpose, the entry's Raises section names it. The
# storage classes and views share their methods: one of each stands for all.
MUST_RAISE = {
    "StreamStorage": ["SchemaMismatchError", "ManifestError", "UnknownProtocolError", "StorageAccessError"],
    "StreamStorage.manifest": ["DatasetNotFoundError", "ManifestError"],
    "StreamStorage.refresh": ["DatasetNotFoundError", "SchemaMismatchError"],
    "StreamStorage.exists": ["StorageAccessError"],
    "StreamStorage.writer": ["DatasetExistsError"],
    "StreamStorage.delete": ["StorageAccessError"],
    "StreamStorage.remove_unreferenced": ["DatasetNotFoundError"],
    "StreamStorage.read_part_record": ["ManifestError", "SchemaMismatchError"],
    "StreamStorage.part_complete": ["SchemaMismatchError"],
    "StreamStorage.commit": ["IncompletePartsError"],
    "StreamStorage.check_shard": ["ShardNotFoundError", "ShardCorruptError"],
    "StreamStorage.verify": ["DatasetNotFoundError"],
    "storage.writer.Writer.append": ["RecordError", "SpanError"],
    "storage.writer.Writer.close": ["StorageAccessError"],
    "StreamNumpyFormat.to_elements": ["RecordError"],
    "DocumentDataset": ["DatasetNotFoundError"],
    "StreamDataset": ["DatasetNotFoundError"],
    "StreamWithMetaDataset": ["DatasetNotFoundError"],
    "DocumentDataset.__getitems__": ["ShardNotFoundError", "StorageAccessError"],
    "StreamDataset.__getitem__": ["ShardNotFoundError", "StorageAccessError"],
    "StreamDataset.__getitems__": ["ShardNotFoundError", "StorageAccessError"],
    "StreamDataset.read_windows": ["ShardNotFoundError", "StorageAccessError"],
    "StreamWithMetaDataset.__getitems__": ["ShardNotFoundError", "StorageAccessError"],
    "StatefulDataLoader.from_storage": ["DatasetNotFoundError", "MixtureError"],
    "StatefulDataLoader.load_state_dict": ["ResumeStateError"],
    "Mixture": ["MixtureError"],
    "Mixture.dataset": ["MixtureError", "ResumeStateError"],
    "Mixture.plan": ["MixtureError"],
    "workers.ingest.ingest_dataset": ["IngestError", "DatasetExistsError", "IngestCancelled"],
}


def test_api_reference_says_what_raises(built_site: Path) -> None:
    sections = _reference_sections((built_site / "reference" / "api.html").read_text(encoding="utf-8"))
    wrong = []
    for name, errors in MUST_RAISE.items():
        kind, section = sections.get(f"guideloom.{name}", ("", ""))
        if not section:
            wrong.append(f"{name}: not in the reference")
            continue
        raises = section.split('doc-section-title">Raises:<', 1)
        if len(raises) < 2:
            wrong.append(f"{name}: no Raises section")
            continue
        text = re.sub(r"<[^>]+>", "", raises[1])
        wrong += [f"{name}: Raises does not name {e}" for e in errors if e not in text]
    assert not wrong, "API reference entries that do not say what they raise:\n" + "\n".join(wrong)


def test_every_example_is_shown_in_the_docs() -> None:
    included = "\n".join(p.read_text(encoding="utf-8") for p in (DOCS / "examples").glob("*.md"))
    for script in EXAMPLES.glob("*.py"):
        assert f'--8<-- "examples/{script.name}"' in included, f"{script.name} has no docs page"


def test_explorer_is_on_the_format_page(built_site: Path) -> None:
    html = (built_site / "choose-a-storage-format.html").read_text(encoding="utf-8")
    assert "data-guideloom-explorer" in html
    assert "explorer/explorer.js" in html and "explorer/explorer.css" in html
    assert (built_site / "explorer" / "explorer.js").exists()
