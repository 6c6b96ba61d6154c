"""The docs keep up with the code: every persisted key is documented, and no relative link is broken.

``tulip_nb.core.keys`` is the single owner of the metadata keys tulip_nb persists; a key added
there without a line in ``docs/persisted-keys.md`` fails here. Every relative markdown link in
``docs/*.md`` (the design, ``docs/architecture.md``, among them) and ``README.md`` must point to an
existing file, and the README links the design and the docs index.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tulip_nb.core import keys

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PERSISTED_KEYS_DOC = DOCS / "persisted-keys.md"

# [text](target) and ![alt](target); the target ends at whitespace or ")" (an optional "title" follows)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def persisted_keys() -> dict[str, str]:
    """``{constant name: key}`` for every public string constant of :mod:`tulip_nb.core.keys`.

    ``__all__`` lists them; an upper-case public string constant missing from ``__all__`` counts
    too, so a new key is caught even before it is exported.
    """
    names = set(keys.__all__) | {n for n, v in vars(keys).items() if n.isupper() and not n.startswith("_")}
    found = {n: getattr(keys, n) for n in sorted(names)}
    return {n: v for n, v in found.items() if isinstance(v, str)}


def test_keys_module_exports_only_string_keys() -> None:
    exported = {n: getattr(keys, n) for n in keys.__all__}
    assert exported and all(isinstance(v, str) and v for v in exported.values()), exported
    assert set(persisted_keys()) == set(keys.__all__), "a public key constant is missing from keys.__all__"
    assert len(set(exported.values())) == len(exported), "two constants name the same key"


@pytest.mark.parametrize(("name", "key"), sorted(persisted_keys().items()))
def test_every_persisted_key_is_documented(name: str, key: str) -> None:
    text = PERSISTED_KEYS_DOC.read_text(encoding="utf-8")
    assert f"`{key}`" in text, f"{name} = {key!r} is not documented in {PERSISTED_KEYS_DOC.relative_to(ROOT)}"
    assert f"`{name}`" in text, f"the constant {name} is not named in {PERSISTED_KEYS_DOC.relative_to(ROOT)}"


def markdown_files() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md"]


def relative_links(path: Path) -> list[str]:
    """Link targets in ``path`` that are neither URLs nor in-page anchors (code is not scanned)."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", path.read_text(encoding="utf-8")))
    out = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
            continue  # http:, mailto:, ... and anchors within the page
        out.append(target)
    return out


def test_the_docs_folder_has_its_pages() -> None:
    names = {p.name for p in DOCS.glob("*.md")}
    pages = {"README.md", "architecture.md", "history-model.md", "storage-layouts.md", "persisted-keys.md"}
    pages |= {"own-backend.md", "signing-and-integrity.md"}
    assert pages <= names
    index = relative_links(DOCS / "README.md")
    indexed = {t.split("#")[0] for t in index}
    assert sorted(names - {"README.md"}) == sorted(indexed), "docs/README.md indexes every page"
    assert {"docs/README.md", "docs/architecture.md"} <= set(relative_links(ROOT / "README.md"))


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files(path: Path) -> None:
    broken = []
    for target in relative_links(path):
        file_part = target.split("#", 1)[0].split("?", 1)[0]
        if file_part and not (path.parent / file_part).exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


def test_the_link_finder_finds_links() -> None:
    sample = DOCS / "README.md"
    assert relative_links(sample), "no link found: the pattern is broken"
    assert _LINK.findall('see [a](b.md#x) and ![i](img/p.png "t") and [u](https://x.y)') == [
        "b.md#x",
        "img/p.png",
        "https://x.y",
    ]
