"""Checkpointer backends: where threads are stored.

Native checkpointers (pass straight to ``Agent(checkpointer=...)``): :class:`MemoryCheckpointer`,
:class:`FileCheckpointer`. Backends with optional dependencies (S3, Redis, PostgreSQL, MySQL,
OpenSearch, HTTP) are imported lazily, so ``import tulip_nb.memory.backends`` pulls in none of them.
:func:`checkpointer_from_url` builds any of them from a URL (``file:./threads``, ``s3://...``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tulip_nb._lazy import lazy_exports
from tulip_nb.memory.backends._memory import MemoryCheckpointer
from tulip_nb.memory.backends.file import FileCheckpointer

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from tulip_nb.memory.backends._adapters import (
        StorageBackendAdapter,
        mysql_checkpointer,
        opensearch_checkpointer,
        postgresql_checkpointer,
        redis_checkpointer,
    )
    from tulip_nb.memory.backends._history_kv import SQLHistoryCheckpointer
    from tulip_nb.memory.backends._mysql import MySQLBackend
    from tulip_nb.memory.backends._opensearch import OpenSearchBackend
    from tulip_nb.memory.backends._postgresql import PostgreSQLBackend
    from tulip_nb.memory.backends._redis_history_checkpointer import RedisHistoryCheckpointer
    from tulip_nb.memory.backends._s3 import S3Backend, s3_checkpointer
    from tulip_nb.memory.backends._urls import checkpointer_from_url
    from tulip_nb.memory.backends.http import HTTPCheckpointer
    from tulip_nb.memory.backends.redis import RedisBackend
    from tulip_nb.memory.backends.tulip_pg import TulipPgCheckpointer

# name -> module, for backends whose dependencies are optional (added as they land)
_LAZY: dict[str, str] = {
    "S3Backend": "._s3",
    "s3_checkpointer": "._s3",
    "HTTPCheckpointer": ".http",
    "StorageBackendAdapter": "._adapters",
    "redis_checkpointer": "._adapters",
    "postgresql_checkpointer": "._adapters",
    "mysql_checkpointer": "._adapters",
    "opensearch_checkpointer": "._adapters",
    "RedisBackend": ".redis",
    "RedisHistoryCheckpointer": "._redis_history_checkpointer",
    "PostgreSQLBackend": "._postgresql",
    "MySQLBackend": "._mysql",
    "OpenSearchBackend": "._opensearch",
    "TulipPgCheckpointer": ".tulip_pg",
    "SQLHistoryCheckpointer": "._history_kv",
    "checkpointer_from_url": "._urls",
}

# Every backend module imports its optional dependency inside its functions, so ``import *`` and
# these names work without any extra installed; using a backend names the extra it needs.
__all__ = [
    "FileCheckpointer",
    "HTTPCheckpointer",
    "MemoryCheckpointer",
    "MySQLBackend",
    "OpenSearchBackend",
    "PostgreSQLBackend",
    "RedisBackend",
    "RedisHistoryCheckpointer",
    "S3Backend",
    "SQLHistoryCheckpointer",
    "StorageBackendAdapter",
    "TulipPgCheckpointer",
    "checkpointer_from_url",
    "mysql_checkpointer",
    "opensearch_checkpointer",
    "postgresql_checkpointer",
    "redis_checkpointer",
    "s3_checkpointer",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
