"""Checkpointers from URLs, for the command line and for notebooks.

=============================================  ==============================================
URL                                            checkpointer
=============================================  ==============================================
``file:./threads``, ``file:///abs/dir``,       :class:`FileCheckpointer` on that directory
``./threads``, ``/abs/dir``, ``~/dir``, or
the name of an existing directory
``memory:``                                    a new :class:`MemoryCheckpointer`
``s3://bucket/prefix/?endpoint_url=...``       :class:`S3Backend` (also ``region_name``)
``redis://host:6379/0?prefix=...&layout=``     ``redis_checkpointer`` (also ``ttl_seconds``)
``postgresql://user@host/db?table_name=...``   ``postgresql_checkpointer`` (also ``schema_name``, ``layout``)
``mysql://root@host:3306/db?table_name=...``   ``mysql_checkpointer`` (also ``layout``, ``ssl=``, below)
``opensearch://host:9200?index_name=...``      ``opensearch_checkpointer`` (``opensearchs://`` for TLS)
``http://host:8000/prefix``, ``https://...``   :class:`HTTPCheckpointer`
=============================================  ==============================================

Anything else is refused with a :class:`~tulip_nb.core.errors.UserError` that lists these forms:
a bare string is a directory only when it is one already or starts like a path (``/``, ``./``,
``../``, ``~``), so ``redis:127.0.0.1:6379`` or ``127.0.0.1:6379`` never becomes a new local
folder that an export would fill and report as a success.

Other query parameters go to the store's driver. Two decide what a URL connects to:

- ``redis://...?prefix=trial:`` is the key prefix exactly as tulip uses it (tulip's keys for the
  same string); it must end in ``:`` (``prefix=trial`` is refused: tulip would mix its threads
  with ``trialx``'s).
- ``mysql://`` uses TLS when the server offers it and plain TCP when it does not
  (``ssl=preferred``, the default: ``mysql://root@127.0.0.1:3306/test`` works against a MariaDB
  without TLS); ``?ssl=required`` connects with TLS or fails saying so, ``?ssl=disabled`` never
  uses it. The connector's ``ssl_disabled=true`` (= ``disabled``), ``ssl_disabled=false`` and
  certificate options such as ``ssl_ca=`` (= ``required``) still work.

>>> checkpointer_from_url("memory:")
MemoryCheckpointer(threads=0)
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from tulip_nb.core.errors import UserError
from tulip_nb.memory.checkpointer import BaseCheckpointer

__all__: list[str] = []

_ACCEPTED = (
    "file:DIR, file:///abs/dir, memory:, s3://bucket/prefix/, redis://host:6379/0, rediss://..., "
    "postgresql://user@host/db (or postgres://), mysql://user@host/db, opensearch(s)://host:9200, "
    "http(s)://host:8000/prefix, or a directory path (an existing directory, or one that starts "
    "with /, ./, ../ or ~)"
)
_NETWORK = frozenset(
    ("s3", "redis", "rediss", "postgresql", "postgres", "mysql", "opensearch", "opensearchs", "http", "https")
)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_PATH_PREFIXES = ("/", "./", "../", "~")


def _refused(why: str) -> UserError:
    return UserError(f"{why}; a checkpointer URL is one of: {_ACCEPTED}")


def _classify(url: str) -> tuple[str, str]:
    """``(kind, rest)``: ``("path", directory)``, ``("memory", "")`` or ``(scheme, url)``; refuse the rest.

    A bare string is a path only when it is clearly one: an existing directory, or a name that
    starts like a path. Anything else (``redis:127.0.0.1:6379``, ``127.0.0.1:6379``) would
    otherwise become a new local folder named after a server, and a copy into it would "succeed".
    """
    head, sep, _ = url.partition("://")
    if sep and _SCHEME.fullmatch(head):
        scheme = head.lower()
        if scheme == "file":
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise _refused(f"file URL {url!r} names a host {parts.netloc!r}; write file:DIR or file:///abs/dir")
            return "path", parts.path
        if scheme == "memory":
            return "memory", ""
        if scheme in _NETWORK:
            return scheme, url
        raise _refused(f"unknown checkpointer URL scheme {scheme!r} in {url!r}")
    if url[:5].lower() == "file:":
        return "path", url[5:] or ".tulip_checkpoints"
    if url.lower() == "memory:":
        return "memory", ""
    if url.startswith(_PATH_PREFIXES) or url in (".", ".."):
        return "path", os.path.expanduser(url)
    scheme = url.partition(":")[0].lower()
    if ":" in url and scheme == "memory":
        raise _refused(f"{url!r} is not a store: the in-process one is just 'memory:'")
    if ":" in url and scheme in _NETWORK:  # even if a folder of that name exists
        raise _refused(f"{url!r} lacks '//' after '{scheme}:' (write {scheme}://...)")
    if os.path.isdir(url):
        return "path", url
    if ":" in url:
        raise _refused(f"{url!r} is neither a URL with a known scheme nor an existing directory")
    raise _refused(f"{url!r} is not an existing directory (write ./{url} or file:{url} to create one)")


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
    scheme, where = _classify(url)
    if scheme == "path":
        from tulip_nb.memory.backends.file import FileCheckpointer

        return FileCheckpointer(base_dir=where or ".tulip_checkpoints", **kwargs)
    if scheme == "memory":
        from tulip_nb.memory.backends._memory import MemoryCheckpointer

        return MemoryCheckpointer(**kwargs)
    if scheme == "s3":
        from tulip_nb.memory.backends._s3 import S3Backend

        parts = urlsplit(url)
        options = dict(parse_qsl(parts.query))
        if not parts.netloc:
            raise UserError(f"s3 URL needs a bucket: s3://bucket/prefix/, got {url!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return S3Backend(parts.netloc, prefix or "tulip/checkpoints/", **{**options, **kwargs})
    if scheme in ("redis", "rediss"):
        from tulip_nb.memory.backends._adapters import redis_checkpointer

        clean, options = _split_options(url, {"prefix", "ttl_seconds", "layout"})
        ttl = options.pop("ttl_seconds", None)
        return redis_checkpointer(url=clean, ttl_seconds=int(ttl) if ttl else None, **{**options, **kwargs})
    if scheme in ("postgresql", "postgres"):
        from tulip_nb.memory.backends._adapters import postgresql_checkpointer

        clean, options = _split_options(url, {"table_name", "schema_name", "layout"})
        return postgresql_checkpointer(dsn=clean, **{**options, **kwargs})
    if scheme == "mysql":
        from tulip_nb.memory.backends._adapters import mysql_checkpointer

        clean, options = _split_options(url, {"table_name", "layout"})
        return mysql_checkpointer(dsn=clean, **{**options, **kwargs})
    if scheme in ("opensearch", "opensearchs"):
        from tulip_nb.memory.backends._adapters import opensearch_checkpointer

        clean, options = _split_options(url, {"index_name"})
        parts = urlsplit(clean)
        host = urlunsplit(("https" if scheme == "opensearchs" else "http", parts.netloc, "", "", ""))
        return opensearch_checkpointer(hosts=[host], **{**options, **kwargs})
    if scheme in ("http", "https"):
        from tulip_nb.memory.backends.http import HTTPCheckpointer

        return HTTPCheckpointer(url, **kwargs)
    raise AssertionError(f"unhandled checkpointer URL scheme {scheme!r}")  # pragma: no cover (_classify)
