"""Optional dependencies of the notebook layers, imported on first use.

``lab``, ``widgets`` and the ``tulip-nb`` CLI all need pandas, matplotlib or ipywidgets only for
some calls, so each such call goes through :func:`require`: the module when it is installed, else
:class:`~tulip_nb.core.errors.MissingDependency` naming the extra to install::

    pd = require("pandas")          # -> the pandas module
    require("matplotlib")           # guard, then a typed ``from matplotlib.figure import Figure``
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tulip_nb.core.errors import MissingDependency

__all__ = ["EXTRAS", "missing", "require"]

EXTRAS: dict[str, str] = {"pandas": "notebook", "matplotlib": "notebook", "ipywidgets": "notebook"}
"""Top-level module -> the ``tulip_nb[...]`` extra that installs it."""


def missing(module: str, *, feature: str | None = None) -> MissingDependency:
    """The error for ``module`` (or a submodule of it) not being importable."""
    top = module.partition(".")[0]
    return MissingDependency(top, EXTRAS.get(top, "notebook"), feature=feature)


def require(module: str, *, feature: str | None = None) -> ModuleType:
    """Import ``module`` (``"pandas"``, ``"matplotlib.ticker"``, ...) or raise
    :class:`~tulip_nb.core.errors.MissingDependency` (also an ``ImportError``) naming its extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise missing(module, feature=feature) from e
