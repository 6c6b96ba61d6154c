"""``tulip_nb.testing`` is a proper public package, and ``import tulip_nb`` never pulls in pytest."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_all_is_sorted_and_resolves() -> None:
    module = importlib.import_module("tulip_nb.testing")
    exported = list(module.__all__)
    assert exported == sorted(set(exported))
    for name in exported:
        assert getattr(module, name) is not None
    assert set(exported) <= set(dir(module))
    checkpointers = importlib.import_module("tulip_nb.testing.checkpointers")
    assert len(checkpointers.TESTS) >= 15 and all(n.startswith("test_") for n in checkpointers.TESTS)


def test_importing_tulip_nb_does_not_import_pytest_or_the_suite() -> None:
    code = (
        "import sys, tulip_nb, tulip_nb.memory.backends, tulip_nb.testing\n"
        "assert 'pytest' not in sys.modules, 'pytest imported'\n"
        "assert 'tulip_nb.testing._suite' not in sys.modules, 'suite imported'\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
