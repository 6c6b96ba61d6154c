"""Checkpointers from URLs, for the command line and for notebooks.

=============================================  ==============================================
URL                                            checkpointer
=============================================  ==============================================
``file:./threads``, ``file:///abs/dir``,       :class:`FileCheckpointer` on that directory
``./threads`` (a plain path)
``memory:``                                    a new :class:`MemoryCheckpointer`
``s3://bucket/prefix/?endpoint_url=...``       :class:`S3Backend` (also ``region_name``)
``redis://host:6379/0?prefix=...&ttl_seconds=``  ``redis_checkpointer``
``postgresql://user@host/db?table_name=...``   ``postgresql_checkpointer`` (also ``schema_name``)
``mysql://root@host:3306/db?table_name=...``   ``mysql_checkpointer``
``opensearch://host:9200?index_name=...``      ``opensearch_checkpointer`` (``opensearchs://`` for TLS)
``http://host:8000/prefix``, ``https://...``   :class:`HTTPCheckpointer`
=============================================  ==============================================

>>> checkpointer_from_url("memory:")
MemoryCheckpointer(threads=0)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tulip_nb.core.errors import UserError
from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__ = ["checkpointer_from_url"]

_SCHEMES = "file:, memory:, s3://, redis://, postgresql://, mysql://, opensearch://, http(s)://"


def _split_options(url: str, names: set[str]) -> tuple[str, dict[str, str]]:
    """Remove the query parameters in ``names`` from ``url``; return (url, those options)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options = {k: v for k, v in query if k in names}
    rest = [(k, v) for k, v in query if k not in names]
    return urlunsplit(parts._replace(query=urlencode(rest))), options


def checkpointer_from_url(url: str, **kwargs: Any) -> BaseCheckpointer:
    """Build the checkpointer a URL names (see the module docstring); ``kwargs`` go to its constructor."""
    if not isinstance(url, str) or not url:
        raise UserError(f"checkpointer URL must be a non-empty string, got {url!r}")
    scheme = urlsplit(url).scheme.lower() if "://" in url or url.startswith(("file:", "memory:")) else ""
    if scheme in ("", "file"):
        from tulip_nb.memory.backends.file import FileCheckpointer

        path = url
        if scheme == "file":
            parts = urlsplit(url)
            path = parts.path if url.startswith("file://") else url[len("file:") :]
        return FileCheckpointer(base_dir=path or ".tulip_checkpoints", **kwargs)
    if scheme == "memory":
        from tulip_nb.memory.backends.memory import MemoryCheckpointer

        return MemoryCheckpointer(**kwargs)
    if scheme == "s3":
        from tulip_nb.memory.backends.s3 import S3Backend

        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query))
        if not parts.netloc:
            raise UserError(f"s3 URL needs a bucket: s3://bucket/prefix/, got {url!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return S3Backend(parts.netloc, prefix or "tulip/checkpoints/", **{**options, **kwargs})
    if scheme in ("redis", "rediss"):
        from tulip_nb.memory.backends.adapters import redis_checkpointer

        clean, options = _split_options(url, {"prefix", "ttl_seconds"})
        ttl = options.pop("ttl_seconds", None)
        return redis_checkpointer(url=clean, ttl_seconds=int(ttl) if ttl else None, **{**options, **kwargs})
    if scheme in ("postgresql", "postgres"):
        from tulip_nb.memory.backends.adapters import postgresql_checkpointer

        clean, options = _split_options(url, {"table_name", "schema_name"})
        return postgresql_checkpointer(dsn=clean, **{**options, **kwargs})
    if scheme == "mysql":
        from tulip_nb.memory.backends.adapters import mysql_checkpointer

        clean, options = _split_options(url, {"table_name"})
        return mysql_checkpointer(dsn=clean, **{**options, **kwargs})
    if scheme in ("opensearch", "opensearchs"):
        from tulip_nb.memory.backends.adapters import opensearch_checkpointer

        clean, options = _split_options(url, {"index_name"})
        parts = urlsplit(clean)
        host = urlunsplit(("https" if scheme == "opensearchs" else "http", parts.netloc, "", "", ""))
        return opensearch_checkpointer(hosts=[host], **{**options, **kwargs})
    if scheme in ("http", "https"):
        from tulip_nb.memory.backends.http import HTTPCheckpointer

        return HTTPCheckpointer(url, **kwargs)
    raise UserError(f"unknown checkpointer URL scheme {scheme!r} in {url!r}; use one of {_SCHEMES}")
