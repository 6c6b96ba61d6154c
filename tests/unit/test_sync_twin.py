"""sync_twin: one mechanism for every sync twin (``ax`` -> ``x``, and the seed's ``x`` -> ``x_sync``)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING

import pytest

from tulip_nb._sync import sync_twin

if TYPE_CHECKING:
    from typing import assert_type


async def ascale(x: int, factor: float = 2.0, *, label: str = "") -> str:
    """Scale ``x`` by ``factor`` and label it."""
    await asyncio.sleep(0)
    return f"{label}{x * factor}"


scale = sync_twin(ascale)


class Boom(RuntimeError):
    pass


async def aboom() -> None:
    await asyncio.sleep(0)
    raise Boom("from the coroutine")


boom = sync_twin(aboom)


class Counter:
    def __init__(self, start: int) -> None:
        self.value = start

    async def aadd(self, n: int = 1) -> int:
        """Add ``n``; returns the new value."""
        await asyncio.sleep(0)
        self.value += n
        return self.value

    add = sync_twin(aadd)

    async def total(self) -> int:
        return self.value

    total_sync = sync_twin(total, name="total_sync")


class Doubling(Counter):
    async def aadd(self, n: int = 1) -> int:  # the twin inherited from Counter must run this one
        return await super().aadd(2 * n)


def test_function_twin_returns_the_result() -> None:
    assert scale(3) == "6.0"
    assert scale(3, 0.5, label="x=") == "x=1.5"


def test_name_qualname_doc_and_module() -> None:
    assert scale.__name__ == "scale" and scale.__qualname__ == "scale"
    assert scale.__module__ == __name__
    assert scale.__doc__ is not None
    head, _, rest = scale.__doc__.partition("\n\n")
    assert head.startswith("Sync twin of :func:`ascale`")
    assert rest == "Scale ``x`` by ``factor`` and label it."
    assert Counter.add.__name__ == "add" and Counter.add.__qualname__ == "Counter.add"
    assert Counter.add.__doc__ is not None and Counter.add.__doc__.startswith("Sync twin of :meth:`aadd`")
    assert Counter.total_sync.__name__ == "total_sync"
    assert (Counter.total_sync.__doc__ or "").startswith("Sync twin of :meth:`total`")
    assert "Sync twin of :func:`ascale`" in (inspect.getdoc(scale) or "")


def test_signature_is_the_coroutine_functions() -> None:
    assert inspect.signature(scale) == inspect.signature(ascale)
    assert inspect.signature(Counter.add) == inspect.signature(Counter.aadd)
    assert str(inspect.signature(Counter(0).add)) == "(n: 'int' = 1) -> 'int'"
    assert not inspect.iscoroutinefunction(scale)


def test_method_binding() -> None:
    c = Counter(10)
    assert c.add() == 11
    assert c.add(5) == 16
    assert Counter.add(c, n=4) == 20  # unbound, with the instance passed explicitly
    assert c.total_sync() == 20 and c.value == 20


def test_a_method_twin_runs_the_subclass_override() -> None:
    d = Doubling(0)
    assert d.add(3) == 6


def test_exceptions_propagate() -> None:
    with pytest.raises(Boom, match="from the coroutine"):
        boom()


async def test_works_inside_a_running_loop() -> None:
    # A notebook cell: an event loop is running in this thread.
    asyncio.get_running_loop()
    assert scale(4) == "8.0"
    assert Counter(1).add(1) == 2
    with pytest.raises(Boom):
        boom()


def test_works_from_another_thread_and_from_the_loop_itself() -> None:
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(scale(1)))
    t.start()
    t.join()
    assert out == ["2.0"]

    async def nested() -> str:  # a coroutine on the background loop calling sync code
        return scale(5)

    assert sync_twin(nested, name="nested_sync")() == "10.0"


def test_misuse_is_refused() -> None:
    def plain(x: int) -> int:
        return x

    with pytest.raises(TypeError, match="async def"):
        sync_twin(plain)  # type: ignore[arg-type]

    async def run() -> None:
        return None

    with pytest.raises(ValueError, match="pass name="):
        sync_twin(run)
    assert sync_twin(run, name="run_sync").__name__ == "run_sync"


def test_agent_and_lab_twins_use_it() -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.lab import Replay, diff_threads, open_thread, threads
    from tulip_nb.lab.export import export_threads

    for name in ("run", "resume", "get_state", "get_state_history", "fork", "update_state"):
        twin = getattr(Agent, f"{name}_sync")
        assert twin.__name__ == f"{name}_sync"
        assert twin.__doc__.startswith(f"Sync twin of :meth:`{name}`")
        assert inspect.signature(twin) == inspect.signature(getattr(Agent, name))
    for fn, afn in ((open_thread, "aopen_thread"), (threads, "athreads"), (diff_threads, "adiff_threads")):
        assert fn.__doc__ is not None and fn.__doc__.startswith(f"Sync twin of :func:`{afn}`")
    assert export_threads.__name__ == "export_threads"
    assert Replay.step.__qualname__ == "Replay.step"
    assert inspect.signature(Replay.run_to) == inspect.signature(Replay.arun_to)


def test_agent_run_sync_in_a_running_loop() -> None:
    from tulip_nb.agent import Agent
    from tulip_nb.models import ScriptedModel

    async def cell() -> str | None:
        agent = Agent(ScriptedModel(["hello"]))
        return agent.run_sync("hi").message.content  # type: ignore[union-attr]

    assert asyncio.run(cell()) == "hello"


if TYPE_CHECKING:  # checked by mypy: the twins keep their parameter and return types
    assert_type(scale(1, 2.0, label="a"), str)
    assert_type(Counter(0).add(1), int)
    assert_type(Counter(0).total_sync(), int)
    assert_type(boom(), None)
