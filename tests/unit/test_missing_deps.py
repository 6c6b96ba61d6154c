"""A core-only install: every lab / widget / CLI path that needs pandas, matplotlib or ipywidgets
raises MissingDependency naming ``pip install 'tulip_nb[notebook]'`` (the CLI: one line, exit 2).

The missing module is simulated with ``sys.modules[name] = None`` (an import of it then fails)."""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tulip_nb._deps import require
from tulip_nb.agent import Agent
from tulip_nb.core import MissingDependency, TulipNBError
from tulip_nb.lab import open_thread, plot_token_usage
from tulip_nb.memory.backends.file import FileCheckpointer
from tulip_nb.models import ScriptedModel, text

INSTALL = "pip install 'tulip_nb[notebook]'"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    base = tmp_path / "threads"

    async def build() -> None:
        agent = Agent(ScriptedModel([text("Hello."), text("Again.")]), [], checkpointer=FileCheckpointer(base))
        await agent.run("Hi", thread_id="t-1")
        await agent.run("Hi again", thread_id="t-2")

    asyncio.run(build())
    return base


def blocked(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_require_names_the_extra_and_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("pandas") is sys.modules["pandas"]
    blocked(monkeypatch, "pandas")
    with pytest.raises(MissingDependency) as info:
        require("pandas", feature="Thread.messages")
    e = info.value
    assert isinstance(e, ImportError) and isinstance(e, TulipNBError)
    assert (e.module, e.extra, e.name, e.install) == ("pandas", "notebook", "pandas", INSTALL)
    assert str(e) == f"Thread.messages needs pandas, which is not installed: {INSTALL}"
    again = pickle.loads(pickle.dumps(e))  # crosses a process boundary (executors, Dask) intact
    assert type(again) is MissingDependency and str(again) == str(e) and again.module == "pandas"


def test_lab_frames_and_plots_without_the_notebook_extra(monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    thread = open_thread(f"file:{store}", "t-1")  # opening needs no pandas
    assert [m.content for m in thread.final_messages] == ["Hi", "Hello."]
    blocked(monkeypatch, "pandas")
    with pytest.raises(MissingDependency, match=r"needs pandas.*pip install 'tulip_nb\[notebook\]'"):
        thread.messages  # noqa: B018
    with pytest.raises(MissingDependency, match=r"needs pandas"):
        thread.checkpoints  # noqa: B018
    monkeypatch.undo()
    frame = thread.usage
    blocked(monkeypatch, "matplotlib", "matplotlib.ticker", "matplotlib.figure")
    with pytest.raises(MissingDependency, match=r"needs matplotlib.*pip install 'tulip_nb\[notebook\]'"):
        plot_token_usage(frame)


def run_python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_widgets_without_ipywidgets() -> None:
    r = run_python(
        """
        import sys
        sys.modules["ipywidgets"] = None
        from tulip_nb.core import MissingDependency
        try:
            from tulip_nb.widgets import Stepper
        except MissingDependency as e:
            print(e.module, "|", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        f"ipywidgets | tulip_nb.widgets.Stepper needs ipywidgets, which is not installed: {INSTALL}"
    )


CORE_ONLY_CLI = """
import sys
for name in ("pandas", "matplotlib", "ipywidgets"):
    sys.modules[name] = None
from tulip_nb.cli import main
sys.exit(main(sys.argv[1:]))
"""


def core_only_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CORE_ONLY_CLI, *args], capture_output=True, text=True, timeout=120)


def test_cli_export_on_a_core_only_install(store: Path, tmp_path: Path) -> None:
    r = core_only_cli("export", f"file:{store}", f"file:{tmp_path / 'copy'}")
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr == f"tulip-nb export: export needs pandas, which is not installed: {INSTALL}\n"
    assert not (tmp_path / "copy").exists()  # failed before opening anything


@pytest.mark.slow
def test_cli_without_pandas_still_lists_shows_and_diffs(store: Path) -> None:
    r = core_only_cli("threads", "ls", str(store))
    assert r.returncode == 0 and r.stdout.split() == ["t-1", "t-2"], r.stderr
    r = core_only_cli("threads", "show", str(store), "t-1")
    assert r.returncode == 0 and "Hello." in r.stdout, r.stderr
    r = core_only_cli("diff", str(store), "t-1", "t-2")
    assert r.returncode == 1 and "Again." in r.stdout, r.stderr
