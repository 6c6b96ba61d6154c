"""The conformance suite as plain test functions, for a module that defines a ``checkpointer`` fixture.

The same tests as :class:`~tulip_nb.testing.CheckpointerSuite` (with every flag on), except the
ones that re-open the store through a fresh instance: those need the class and its factory. Import
them into a ``test_*.py`` next to your fixture::

    import pytest
    from tulip_nb.testing import checkpointers

    globals().update(checkpointers.TESTS)

    @pytest.fixture
    async def checkpointer():
        async with MyCheckpointer() as cp:
            yield cp
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tulip_nb.testing._suite import CheckpointerSuite

__all__ = ["TESTS"]


def _as_function(name: str) -> Callable[..., Any]:
    method = getattr(CheckpointerSuite, name)
    params = list(inspect.signature(method).parameters.values())[1:]  # without self

    async def test(*args: Any, **kwargs: Any) -> Any:
        return await method(CheckpointerSuite(), *args, **kwargs)

    test.__name__ = test.__qualname__ = name
    test.__doc__ = method.__doc__
    test.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    marks = getattr(method, "pytestmark", None)
    if marks:
        test.pytestmark = list(marks)  # type: ignore[attr-defined]
    return test


TESTS: dict[str, Callable[..., Any]] = {
    name: _as_function(name)
    for name in sorted(vars(CheckpointerSuite))
    if name.startswith("test_")
    and "checkpointer_store" not in inspect.signature(getattr(CheckpointerSuite, name)).parameters
}
"""``{name: test function}``: each takes the ``checkpointer`` fixture (and its own parameters)."""

globals().update(TESTS)
