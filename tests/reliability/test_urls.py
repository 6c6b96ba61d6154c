"""checkpointer_from_url: the accepted forms, and everything else refused without touching the disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tulip_nb.core.errors import UserError
from tulip_nb.memory.backends import FileCheckpointer, MemoryCheckpointer, checkpointer_from_url

ACCEPTED_NAMES = ("file:", "memory:", "s3://", "redis://", "rediss://", "postgresql://", "mysql://", "http(s)://")


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("s3://bucket/prefix/", "S3Backend"),
        ("redis://127.0.0.1:6379/0", "RedisHistoryCheckpointer"),
        ("rediss://127.0.0.1:6380/0", "RedisHistoryCheckpointer"),
        ("REDIS://127.0.0.1:6379/0", "RedisHistoryCheckpointer"),
        ("redis://127.0.0.1:6379/0?layout=tulip", "RedisHistoryCheckpointer"),
        ("redis://127.0.0.1:6379/0?layout=kv", "StorageBackendAdapter"),
        ("redis://127.0.0.1:6379/0?ttl_seconds=60", "StorageBackendAdapter"),
        ("postgresql://postgres@127.0.0.1/test", "SQLHistoryCheckpointer"),
        ("postgres://postgres@127.0.0.1/test", "SQLHistoryCheckpointer"),
        ("mysql://root@127.0.0.1:3306/test", "SQLHistoryCheckpointer"),
        ("opensearch://127.0.0.1:9200", "StorageBackendAdapter"),
        ("opensearchs://127.0.0.1:9200", "StorageBackendAdapter"),
        ("http://127.0.0.1:8000/prefix", "HTTPCheckpointer"),
        ("https://example.invalid/prefix", "HTTPCheckpointer"),
        ("memory:", "MemoryCheckpointer"),
        ("memory://", "MemoryCheckpointer"),
    ],
)
def test_network_and_memory_urls_are_accepted(url: str, kind: str) -> None:
    cp = checkpointer_from_url(url)  # builds; connects to nothing
    try:
        assert type(cp).__name__ == kind
    finally:
        asyncio.run(cp.close())


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("file:./x", "x"),
        ("file:x", "x"),
        ("file:///abs/dir", "/abs/dir"),
        ("file://localhost/abs/dir", "/abs/dir"),
        ("./new", "new"),
        ("../up", "../up"),
        ("/abs/dir", "/abs/dir"),
        (".", "."),
    ],
)
def test_paths_that_are_clearly_paths(url: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cp = checkpointer_from_url(url)
    assert isinstance(cp, FileCheckpointer) and str(cp.base_dir) == where
    assert list(tmp_path.iterdir()) == []  # building a checkpointer creates nothing


def test_home_is_expanded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    cp = checkpointer_from_url("~/threads")
    assert isinstance(cp, FileCheckpointer) and cp.base_dir == tmp_path / "threads"


def test_a_bare_existing_directory_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo_threads").mkdir()
    (tmp_path / "127.0.0.1:6379").mkdir()
    assert str(checkpointer_from_url("demo_threads").base_dir) == "demo_threads"  # type: ignore[attr-defined]
    assert str(checkpointer_from_url("127.0.0.1:6379").base_dir) == "127.0.0.1:6379"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis:127.0.0.1:6379", "lacks '//' after 'redis:'"),
        ("rediss:host", "lacks '//' after 'rediss:'"),
        ("postgres:/127.0.0.1/test", "lacks '//' after 'postgres:'"),
        ("mysql:root@host/db", "lacks '//' after 'mysql:'"),
        ("127.0.0.1:6379", "neither a URL with a known scheme nor an existing directory"),
        ("localhost:8000", "neither a URL with a known scheme nor an existing directory"),
        ("threads_not_there", "is not an existing directory"),
        ("memory:x", "just 'memory:'"),
        ("ftp://host/x", "unknown checkpointer URL scheme 'ftp'"),
        ("file://host/dir", "names a host 'host'"),
        ("file://./threads", "names a host '.'"),
    ],
)
def test_anything_else_is_refused_with_the_accepted_forms(
    url: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as info:
        checkpointer_from_url(url)
    message = str(info.value)
    assert says in message and repr(url) in message
    for name in ACCEPTED_NAMES:
        assert name in message, name
    assert list(tmp_path.iterdir()) == []  # and no folder named after a server


def test_a_folder_named_like_a_url_does_not_make_it_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "redis:127.0.0.1:6379").mkdir()  # left by an older version's mistake
    with pytest.raises(UserError, match="lacks '//'"):
        checkpointer_from_url("redis:127.0.0.1:6379")
    cp = checkpointer_from_url("./redis:127.0.0.1:6379")  # said explicitly, it is that folder
    assert isinstance(cp, FileCheckpointer) and cp.base_dir == Path("redis:127.0.0.1:6379")


def test_not_a_string() -> None:
    with pytest.raises(UserError, match="non-empty string"):
        checkpointer_from_url("")
    with pytest.raises(UserError, match="non-empty string"):
        checkpointer_from_url(None)  # type: ignore[arg-type]
    assert isinstance(checkpointer_from_url("memory:"), MemoryCheckpointer)
