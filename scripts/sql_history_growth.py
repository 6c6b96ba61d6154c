"""The issue-26 research thread (300 turns, a save after every model call) into PostgreSQL or MySQL.

Replays :func:`bench.research.record`'s saves the agent's way (one message list, grown save by save)
into ``postgresql_checkpointer`` / ``mysql_checkpointer`` (the history layout by default) on a
fresh table, and prints: the time of all saves, the first and last 100 saves, and the tables'
size (tulip's table and the history's side tables) after 100 and 300 turns. The table is dropped
afterwards. Run once; it is a measurement, not a test::

    python scripts/sql_history_growth.py                     # PostgreSQL, layout="history"
    python scripts/sql_history_growth.py --kind mysql --layout tulip --no-sign
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.research import record
from tulip_nb.memory.backends import mysql_checkpointer, postgresql_checkpointer

PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_DSN = "mysql://root@127.0.0.1:3306/test"


def table_bytes(cp: Any, kind: str) -> dict[str, int]:
    """Each table's total size on the server (data, indexes, TOAST), by name."""
    tables = [cp.dialect.kv_table, *cp.dialect.side_tables()]

    def size(conn: Any) -> dict[str, int]:
        total: dict[str, int] = {}
        for t in tables:
            if kind == "postgresql":
                total[t] = int(conn.native("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0])
                live = conn.native(f"SELECT COALESCE(SUM(pg_column_size(x.*)), 0) FROM {t} x").fetchone()[0]
                total["live " + t] = int(live)
            else:
                name = t.strip("`")
                conn.native(f"ANALYZE TABLE `{name}`")
                row = conn.native(
                    "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES"
                    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                    (name,),
                ).fetchone()
                total[t] = int(row[0] or 0)
        return total

    out: dict[str, int] = cp.store.read_sync(size)
    return out


def drop(cp: Any, kind: str) -> None:
    raw = cp.dialect._connect()
    try:
        for t in [cp.dialect.kv_table, *cp.dialect.side_tables()]:
            if kind == "postgresql":
                raw.execute(f"DROP TABLE IF EXISTS {t}")
            else:
                cur = raw.cursor()
                cur.execute(f"DROP TABLE IF EXISTS {t}")
                cur.close()
    finally:
        raw.close()


async def main(kind: str, layout: str, turns: int, work: Any, sign: bool = True) -> None:
    print(work.describe())
    table = f"tnb_growth_{uuid.uuid4().hex[:10]}"
    if kind == "postgresql":
        cp = postgresql_checkpointer(PG_DSN, table_name=table, layout=layout, sign=sign)
    else:
        cp = mysql_checkpointer(MYSQL_DSN, table_name=table, layout=layout, ssl_disabled=True, sign=sign)
    messages = work.fresh_messages()
    parsed = [s.parse() for s in work.saves]
    times: list[float] = []
    sizes: dict[int, dict[str, int]] = {}
    turn = 0
    try:
        for save, rest in zip(work.saves, parsed, strict=True):
            state = save.state(messages[: save.n], rest)
            start = time.perf_counter()
            await cp.save(state, "research", metadata=dict(save.metadata))
            times.append(time.perf_counter() - start)
            if save.metadata.get("source") == "final":
                turn += 1
                if turn in (100, turns):
                    sizes[turn] = table_bytes(cp, kind)
        print(f"{kind}, layout={layout}, sign={sign}: {len(times):,} saves in {sum(times):.1f} s")
        print(f"  first 100 saves {sum(times[:100]):.2f} s, last 100 {sum(times[-100:]):.2f} s", end="")
        print(f" (last/first {sum(times[-100:]) / sum(times[:100]):.2f})")
        for source in ("iteration", "final"):
            mine = [t for t, sv in zip(times, work.saves, strict=True) if sv.metadata.get("source") == source]
            head, tail = mine[: len(mine) // 10], mine[-(len(mine) // 10) :]
            print(
                f"  {source} saves ({len(mine)}): mean {1e3 * sum(mine) / len(mine):.1f} ms;"
                f" first tenth {1e3 * sum(head) / len(head):.1f} ms, last tenth {1e3 * sum(tail) / len(tail):.1f} ms"
            )
        for t, b in sorted(sizes.items()):
            files = {k: v for k, v in b.items() if not k.startswith("live ")}
            each = ", ".join(f"{name.split('.')[-1].strip(chr(34) + '`')} {n / 1e6:.2f}" for name, n in files.items())
            print(f"  tables after {t} turns: {sum(files.values()) / 1e6:.2f} MB ({each})")
            live = {k[5:]: v for k, v in b.items() if k.startswith("live ")}
            if live:
                each = ", ".join(f"{name.split('.')[-1].strip(chr(34))} {n / 1e6:.2f}" for name, n in live.items())
                print(f"    of which live rows (pg_column_size): {sum(live.values()) / 1e6:.2f} MB ({each})")
        loaded = await cp.load("research")
        assert loaded is not None and len(loaded.messages) == len(messages)
    finally:
        await cp.close()
        drop(cp, kind)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=["postgresql", "mysql"], default="postgresql")
    parser.add_argument("--layout", choices=["history", "tulip"], default="history")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--no-sign", action="store_true", help="sign=False (no hash chain)")
    args = parser.parse_args()
    work = record(args.turns)  # runs its own event loop
    asyncio.run(main(args.kind, args.layout, args.turns, work, sign=not args.no_sign))
