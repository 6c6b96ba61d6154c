"""One module per backend family, each exporting ``FACTORIES`` (see ../conftest.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from tulip_nb.memory.checkpointer import BaseCheckpointer

Factory = Callable[[Path], contextlib.AbstractAsyncContextManager[BaseCheckpointer]]
