"""Two uvicorn workers (real processes, ``tulip-nb serve --workers 2``) sharing PostgreSQL threads."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import require_service

from ._proc import children, serve

pytestmark = [pytest.mark.service("postgresql"), pytest.mark.slow]

PG = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    import asyncpg

    from tulip_nb.core.state import AgentState
    from tulip_nb.memory.backends import checkpointer_from_url

    table = f"tnb_srv_{uuid.uuid4().hex[:12]}"
    url = f"{PG}?table_name={table}"
    cp = checkpointer_from_url(url)  # create the table once, before two workers race to
    try:
        await cp.save(AgentState(), "warmup")
        await cp.delete("warmup")
    finally:
        await cp.close()
    yield url
    conn = await asyncpg.connect(PG)
    try:
        await conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    finally:
        await conn.close()


async def _turn(client: httpx.AsyncClient, thread: str, prompt: str) -> httpx.Response:
    return await client.post("/invoke", json={"prompt": prompt, "thread_id": thread}, timeout=60)


async def test_two_workers_share_threads_and_refuse_races(pg_url: str, tmp_path: Path) -> None:
    with serve(
        "--app", "tests.server.served_agent:agent", "--checkpointer", pg_url, "--workers", "2", log_dir=tmp_path
    ) as (url, pid):
        assert len(children(pid)) >= 2  # two worker processes
        limits = httpx.Limits(max_connections=60, keepalive_expiry=2.0)  # below the server's keep-alive
        async with httpx.AsyncClient(base_url=url, limits=limits) as http:
            # 50 clients x 10 threads, two turns per thread: every turn is kept, in order
            async def client(i: int) -> None:
                for turn in range(2):
                    for j in range(10):
                        r = await _turn(http, f"c{i}-t{j}", f"c{i}-t{j}-turn{turn}")
                        assert r.status_code == 200, r.text
                        assert r.json()["iterations"] == 1

            await asyncio.gather(*(client(i) for i in range(50)))
            sample = [(i, j) for i in range(50) for j in range(10)]

            async def check(i: int, j: int) -> None:
                r = await http.get(f"/threads/c{i}-t{j}")
                users = [m["content"] for m in r.json()["messages"] if m["role"] == "user"]
                assert users == [f"c{i}-t{j}-turn0", f"c{i}-t{j}-turn1"]

            for k in range(0, len(sample), 50):
                await asyncio.gather(*(check(i, j) for i, j in sample[k : k + 50]))

            # same-thread races: losers get 409, winners' turns are all there, nothing else
            errors: Counter[str] = Counter()
            won: list[str] = []
            # a new connection per request, so the kernel spreads the racers over both workers
            fresh = httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_keepalive_connections=0))
            for rnd in range(6):
                prompts = [f"slow race {rnd}-{n}" for n in range(12)]
                rs = await asyncio.gather(*(_turn(fresh, "race", p) for p in prompts))
                for p, r in zip(prompts, rs, strict=True):
                    if r.status_code == 200:
                        won.append(p)
                    else:
                        assert r.status_code == 409, r.text
                        errors[r.json()["error"]] += 1
                if errors["CheckpointConflict"] and rnd >= 1:
                    break
            await fresh.aclose()
            assert won and errors["CheckpointConflict"] >= 1, errors  # a cross-worker race was caught by CAS
            assert set(errors) <= {"CheckpointConflict", "ThreadBusy"}
            r = await http.get("/threads/race")
            users = [m["content"] for m in r.json()["messages"] if m["role"] == "user"]
            assert sorted(users) == sorted(won) and len(users) == len(won)
            r = await http.get("/threads/race/checkpoints", params={"limit": 1000})
            assert len(r.json()["checkpoints"]) == len(won)  # a loser saved nothing
