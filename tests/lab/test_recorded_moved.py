"""A summariser recorded under a module that has since moved still imports (simulate reuses it)."""

from __future__ import annotations

from tulip_nb.lab._recorded import import_path, import_summarizer
from tulip_nb.testing import keep_facts


def test_a_summariser_recorded_under_the_old_messy_module_still_imports() -> None:
    # threads generated before issue 31 name the messy generator's old public module
    assert import_summarizer({"module": "tulip_nb.testing._messy", "qualname": "keep_facts"}) is keep_facts


def test_a_summariser_is_recorded_where_it_imports_today() -> None:
    path = import_path(keep_facts)
    assert path is not None
    assert import_summarizer({"module": path[0], "qualname": path[1]}) is keep_facts


def test_an_unknown_module_is_no_summariser() -> None:
    assert import_summarizer({"module": "tulip_nb.testing.no_such_module", "qualname": "keep_facts"}) is None
