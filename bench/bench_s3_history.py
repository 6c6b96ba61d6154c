"""S3Backend on the history model (issue 27): the 300-turn workload saved like an agent, on moto.

``python -m bench.bench_s3_history [turns]`` starts moto's server in process (127.0.0.1, a free
port), replays the seeded conversation of :mod:`bench.workload` cut at ``turns`` user turns through
:func:`bench.bench_storage.save_like_agent` (a save after every iteration) into one thread, and
prints: every save's time (total, first 100, last 100), what the bucket holds at 100 turns and at
the end (bytes and objects, history and tulip's projection apart, against the messages' JSON), the
head object's size, and a load of the latest checkpoint from a fresh instance. One run; figures,
not pass/fail.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import statistics
import sys
import time
import uuid
from typing import Any

from bench.bench_storage import save_like_agent
from bench.workload import build_conversation
from tulip_nb.core import AgentState, Message

CREDS = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cut(messages: list[Message], turns: int) -> list[Message]:
    """The messages before the first user message of turn ``turns + 1``."""
    seen = 0
    for i, m in enumerate(messages):
        if m.role == "user":
            seen += 1
            if seen > turns:
                return messages[:i]
    return messages


def _stored(cp: Any) -> dict[str, tuple[int, int]]:
    """'history' / 'tulip' -> (bytes, objects) under each prefix."""
    out = {}
    for name, prefix in (("history", cp.history_prefix), ("tulip", cp.prefix)):
        objs = list(cp._io.list_keys(prefix))
        out[name] = (sum(o.size for o in objs), len(objs))
    return out


class _Timed:
    """Forwards ``save`` to the backend, timing each one and measuring the bucket once turn ``mark`` is done."""

    def __init__(self, cp: Any, mark: int) -> None:
        self.cp, self.mark = cp, mark
        self.times: list[float] = []
        self.written: list[tuple[str, int]] = []
        self.per_save: list[tuple[int, int]] = []  # (history bytes, projection bytes) written by each save
        self.at_mark: tuple[dict[str, tuple[int, int]], int] | None = None

    async def save(self, state: AgentState, thread_id: str, **kwargs: Any) -> str:
        users = sum(1 for m in state.messages if m.role == "user")
        if self.at_mark is None and users > self.mark:
            done = _cut(list(state.messages), self.mark)
            self.at_mark = (_stored(self.cp), sum(len(m.json_bytes()) for m in done))
        before = len(self.written)
        t0 = time.perf_counter()
        cid: str = await self.cp.save(state, thread_id, **kwargs)
        self.times.append(time.perf_counter() - t0)
        mine = self.written[before:]
        history = sum(n for k, n in mine if k.startswith(self.cp.history_prefix))
        self.per_save.append((history, sum(n for _, n in mine) - history))
        return cid


async def run(turns: int = 300) -> dict[str, Any]:
    from moto.server import ThreadedMotoServer

    from tulip_nb.memory.backends import S3Backend

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        messages = _cut(build_conversation(4000), turns)
        cp = S3Backend(bucket, endpoint_url=url, **CREDS)
        written: list[tuple[str, int]] = []  # (key, bytes) of every PUT
        put = cp._io.put
        cp._io.put = lambda key, body, *a, **kw: (written.append((key, len(body))), put(key, body, *a, **kw))[1]
        timed = _Timed(cp, 100)
        timed.written = written
        t0 = time.perf_counter()
        state = await save_like_agent(timed, "conv", messages)
        wall = time.perf_counter() - t0
        end = _stored(cp)
        head = next(iter(cp._io.list_keys(cp.history_prefix + "h/")))
        await cp.close()
        fresh = S3Backend(bucket, endpoint_url=url, **CREDS)
        gets: list[str] = []
        get = fresh._io.get
        fresh._io.get = lambda key, **kw: (gets.append(key), get(key, **kw))[1]
        t1 = time.perf_counter()
        loaded = await fresh.load("conv")
        load_s = time.perf_counter() - t1
        assert loaded is not None and loaded.model_dump() == state.model_dump()
        await fresh.close()
        msg_json = sum(len(m.json_bytes()) for m in state.messages)
        times = timed.times
        return {
            "turns": turns,
            "messages": len(state.messages),
            "saves": len(times),
            "messages_json": msg_json,
            "save_total_s": sum(times),
            "wall_s": wall,
            "first100_mean_ms": 1000 * statistics.mean(times[:100]),
            "last100_mean_ms": 1000 * statistics.mean(times[-100:]),
            "at100": timed.at_mark,
            "end": end,
            "head_bytes": head.size,
            "history_written_first100": statistics.mean(h for h, _ in timed.per_save[:100]),
            "history_written_last100": statistics.mean(h for h, _ in timed.per_save[-100:]),
            "history_written_max": max(h for h, _ in timed.per_save),
            "history_written_total": sum(h for h, _ in timed.per_save),
            "projection_written_first100": statistics.mean(p for _, p in timed.per_save[:100]),
            "projection_written_last100": statistics.mean(p for _, p in timed.per_save[-100:]),
            "load_latest_fresh_s": load_s,
            "load_gets": len(gets),
        }
    finally:
        server.stop()


def _main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    r = asyncio.run(run(turns))
    mj = r["messages_json"]
    print(f"{r['turns']} turns, {r['messages']} messages, {r['saves']} saves, messages' JSON {mj / 1e6:.2f} MB")
    print(f"saves: {r['save_total_s']:.1f} s in all (wall {r['wall_s']:.1f} s)")
    ratio = r["last100_mean_ms"] / r["first100_mean_ms"]
    print(f"mean save: first 100 {r['first100_mean_ms']:.1f} ms, last 100 {r['last100_mean_ms']:.1f} ms ({ratio:.2f}x)")
    if r["at100"] is not None:
        stored, mj100 = r["at100"]
        total = sum(b for b, _ in stored.values())
        objs = sum(n for _, n in stored.values())
        print(
            f"at 100 turns: {total / 1e6:.2f} MB in {objs} objects (history {stored['history'][0] / 1e6:.2f} MB /"
            f" {stored['history'][1]}, tulip {stored['tulip'][0] / 1e6:.2f} MB / {stored['tulip'][1]}),"
            f" {total / mj100:.2f}x the messages' JSON ({mj100 / 1e6:.2f} MB)"
        )
    end = r["end"]
    total = sum(b for b, _ in end.values())
    print(
        f"at {r['turns']} turns: {total / 1e6:.2f} MB in {sum(n for _, n in end.values())} objects (history"
        f" {end['history'][0] / 1e6:.2f} MB / {end['history'][1]}, tulip {end['tulip'][0] / 1e6:.2f} MB /"
        f" {end['tulip'][1]}), {total / mj:.2f}x the messages' JSON"
    )
    print(f"head object: {r['head_bytes']} bytes")
    print(
        f"history bytes written per save: first 100 {r['history_written_first100'] / 1e3:.1f} kB, last 100"
        f" {r['history_written_last100'] / 1e3:.1f} kB (max {r['history_written_max'] / 1e3:.0f} kB, all saves"
        f" {r['history_written_total'] / 1e6:.2f} MB); tulip's projection per save: first 100"
        f" {r['projection_written_first100'] / 1e3:.1f} kB, last 100 {r['projection_written_last100'] / 1e3:.1f} kB"
    )
    print(f"load latest, fresh instance: {1000 * r['load_latest_fresh_s']:.0f} ms, {r['load_gets']} GETs")


if __name__ == "__main__":
    _main()
