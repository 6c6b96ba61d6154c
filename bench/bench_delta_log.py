"""The delta log of the file store (``tulip_nb.memory.backends._delta_log``) beside its floors.

The BENCH.md conversation (2000 messages, a save after each of its 937 model calls), written to
one :class:`DeltaLog` with ``fsync=True``, against the physical floor measured in the same run:

- *a save at 2000 messages*: one more iteration (an assistant tool call and its result) appended
  to the 2000-message thread, vs. appending those two messages' JSON to a plain file +
  ``fdatasync`` (interleaved repetitions, medians);
- *the whole conversation*: 937 saves, total time and disk, vs. the same append-only floor, and
  the disk vs. the messages' JSON;
- *load latest* from a new ``DeltaLog`` (a new process: header scan + chain), vs. reading and
  ``orjson.loads`` of that state's JSON, and vs. today's layout (read + decode one envelope);
- *load an older checkpoint* (20 picked at random, index already read, nothing cached), vs. the
  same floor for that checkpoint's state, and vs. decoding that state's envelope;
- *replay*: every checkpoint loaded in order from one ``DeltaLog`` (each a delta of the one
  before, which is cached);
- *header scan* of a 10,000-checkpoint log (a long thread with a compaction every 500 saves)
  from a new ``DeltaLog``.

    .venv/bin/python -m bench.bench_delta_log [--runs 3] [--reps 25]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from bench.workload import build_conversation, iteration_ends
from tulip_nb.core import AgentState, Message
from tulip_nb.memory._envelope import decode_envelope, encode_envelope
from tulip_nb.memory.backends._delta_log import LOG_NAME, DeltaLog, Kind

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
X = "\u00d7"  # the multiplication sign of the ratios


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def conversation(directory: Path, fsync: bool = True) -> tuple[list[float], DeltaLog, dict[str, int]]:
    """The 937 saves into a new log: per-save times, the log, and each checkpoint's message count."""
    directory.mkdir(parents=True)
    msgs = build_conversation(2000)  # fresh: every message is serialised on its first save
    state = AgentState(agent_id="bench-agent", metadata={"user_id": "u-42"}, started_at=T0)
    log = DeltaLog(directory / LOG_NAME, fsync=fsync)
    times, counts, prev, parent = [], {}, 0, None
    for i, end in enumerate(iteration_ends(msgs)):
        state.messages.extend(msgs[prev:end])
        state.iteration += 1
        state.updated_at = T0 + timedelta(seconds=i)
        prev = end
        t0 = time.perf_counter()
        header = log.append_checkpoint(f"c{i:04d}", T0 + timedelta(seconds=i), state, {"step": i}, parent)
        times.append(time.perf_counter() - t0)
        parent = header.checkpoint_id
        counts[parent] = end
    return times, log, counts


def floor_conversation(directory: Path) -> tuple[list[float], int]:
    """Append each iteration's new messages (JSON lines) + fdatasync: the physical floor."""
    directory.mkdir(parents=True)
    msgs = build_conversation(2000)
    dicts = [orjson.loads(m.json_bytes()) for m in msgs]
    times, prev = [], 0
    fd = os.open(directory / "thread.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for end in iteration_ends(msgs):
            t0 = time.perf_counter()
            os.write(fd, b"".join(orjson.dumps(d) + b"\n" for d in dicts[prev:end]))
            os.fdatasync(fd)
            times.append(time.perf_counter() - t0)
            prev = end
    finally:
        os.close(fd)
    return times, (directory / "thread.jsonl").stat().st_size


def save_at_2000(tmp: Path, reps: int) -> tuple[float, float]:
    """Median ms of one more iteration's save at 2000 messages: the log vs append + fdatasync."""
    _, log, _ = conversation(tmp / "at2000")
    state, _ = log.load()
    fd = os.open(tmp / "at2000.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    ours, floor = [], []
    try:
        for i in range(reps):
            call = Message.model_validate(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": f"call_x{i}", "name": "read_file", "arguments": {"path": f"src/mod_{i}.py"}}],
                }
            )
            result = Message.tool("def f():\n    return 1\n" * 60, tool_call_id=f"call_x{i}", name="read_file")
            state.messages += [call, result]
            state.iteration += 1
            t0 = time.perf_counter()
            log.append_checkpoint(
                f"x{i}", T0 + timedelta(days=1, seconds=i), state, {"step": i}, log.latest().checkpoint_id
            )  # type: ignore[union-attr]
            ours.append(time.perf_counter() - t0)
            fresh = [orjson.loads(m.json_bytes()) for m in (call, result)]  # untimed: not yet serialised
            t0 = time.perf_counter()
            os.write(fd, b"".join(orjson.dumps(d) + b"\n" for d in fresh))
            os.fdatasync(fd)
            floor.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return statistics.median(ours), statistics.median(floor)


def loads(tmp: Path, log: DeltaLog, reps: int) -> list[str]:
    latest = log.latest()
    assert latest is not None
    state, _ = log.load()
    data = state.to_json_bytes()
    floor_file = tmp / "latest.json"
    floor_file.write_bytes(data)
    envelope = tmp / "envelope.json"
    envelope.write_bytes(encode_envelope(latest.checkpoint_id, "conv", latest.created_at, state, {}))
    cold, floor, env = [], [], []
    for _ in range(reps):
        cold.append(_timed(lambda: DeltaLog(log.path).load()))
        floor.append(_timed(lambda: orjson.loads(floor_file.read_bytes())))
        env.append(_timed(lambda: decode_envelope(envelope.read_bytes(), where="bench")))
    c, f, e = (statistics.median(x) for x in (cold, floor, env))
    rows = [
        f"| load latest, new DeltaLog (no scan: last record + chain of {latest.depth}) | {_ms(c)} | "
        f"{_ms(f)} | {c / f:.2f}{X} |",
        f"| (today's layout: read + decode one envelope) | {_ms(e)} | {_ms(f)} | {e / f:.2f}{X} |",
    ]
    rng = random.Random(0)
    picks = rng.sample(log.headers()[:-1], 20)
    ratios, times, vs_env = [], [], []
    for h in picks:
        old_state = log.load(h.checkpoint_id)[0]
        path, env_path = tmp / f"{h.checkpoint_id}.json", tmp / f"{h.checkpoint_id}.env.json"
        path.write_bytes(old_state.to_json_bytes())
        env_path.write_bytes(encode_envelope(h.checkpoint_id, "conv", h.created_at, old_state, {}))
        ours, floors, envs = [], [], []
        for _ in range(max(3, reps // 5)):
            reader = DeltaLog(log.path)
            reader.headers()
            ours.append(_timed(lambda: reader.load(h.checkpoint_id)))  # noqa: B023
            floors.append(_timed(lambda: orjson.loads(path.read_bytes())))  # noqa: B023
            envs.append(_timed(lambda: decode_envelope(env_path.read_bytes(), where="bench")))  # noqa: B023
        ratios.append(statistics.median(ours) / statistics.median(floors))
        vs_env.append(statistics.median(ours) / statistics.median(envs))
        times.append(statistics.median(ours))
    reader = DeltaLog(log.path)
    replay = _timed(lambda: [reader.load(h.checkpoint_id) for h in reader.headers()]) / len(log.headers())
    rows.append(f"| replay: load every checkpoint in order, per checkpoint | {_ms(replay)} | — | — |")
    rows.append(
        f"| load one of 20 older checkpoints (index read, nothing cached) | median {_ms(statistics.median(times))} | "
        f"— | median {statistics.median(ratios):.2f}{X}, worst {max(ratios):.2f}{X} (vs one envelope: median "
        f"{statistics.median(vs_env):.2f}{X}, worst {max(vs_env):.2f}{X}) |"
    )
    return rows


def scan_10000(tmp: Path, runs: int) -> list[str]:
    directory = tmp / "scan"
    directory.mkdir()
    pool = build_conversation(2000)
    log = DeltaLog(directory / LOG_NAME, fsync=False)
    state = AgentState(agent_id="bench-agent", messages=pool[:1])
    parent = None
    t0 = time.perf_counter()
    for i in range(10_000):
        state.messages.append(pool[1 + i % 1999])
        if i % 500 == 499:
            state.messages = [state.messages[0], Message.user(f"summary {i}"), *state.messages[-100:]]
        parent = log.append_checkpoint(f"c{i:05d}", T0 + timedelta(seconds=i), state, {"step": i}, parent).checkpoint_id
    build_s = time.perf_counter() - t0
    size = log.path.stat().st_size
    scans, read = [], 0
    for _ in range(runs):
        reader = DeltaLog(log.path)
        scans.append(_timed(reader.headers))
        read = reader.bytes_read
    snapshots = sum(1 for h in log.headers() if h.kind == Kind.SNAPSHOT)
    return [
        f"| header scan of 10,000 checkpoints, new DeltaLog | {_ms(statistics.median(scans))} | — | "
        f"file {size / 1e6:.1f} MB ({snapshots} snapshots), read {read / 1e6:.2f} MB; built in {build_s:.1f} s |"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="whole-conversation runs (median)")
    parser.add_argument("--reps", type=int, default=25, help="repetitions of each single save / load")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tulip_nb_bench_delta_"))
    try:
        totals, floors, last50, floor50, disks = [], [], [], [], []
        floor_disk = 0
        log = None
        for run in range(args.runs):
            times, log, _ = conversation(tmp / f"conv{run}")
            ftimes, floor_disk = floor_conversation(tmp / f"floor{run}")
            totals.append(sum(times))
            floors.append(sum(ftimes))
            last50.append(statistics.mean(times[-50:]))
            floor50.append(statistics.mean(ftimes[-50:]))
            disks.append(log.path.stat().st_size)
        assert log is not None
        msgs_json = sum(len(m.json_bytes()) + 1 for m in build_conversation(2000)) + 1
        one, one_floor = save_at_2000(tmp, args.reps)
        tot, ftot = statistics.median(totals), statistics.median(floors)
        l50, f50 = statistics.median(last50), statistics.median(floor50)
        kinds = [h.kind for h in log.headers()]
        print("| delta log (fsync=True) | ours (ms) | floor (ms) | ratio |")
        print("|---|---:|---:|---:|")
        print(
            f"| a save at 2000 messages (+1 iteration), median of {args.reps} | {_ms(one)} | {_ms(one_floor)} | "
            f"{one / one_floor:.2f}{X} |"
        )
        print(f"| mean of the last 50 saves of the conversation | {_ms(l50)} | {_ms(f50)} | {l50 / f50:.2f}{X} |")
        print(
            f"| 937 saves, total (s), median of {args.runs} runs | {tot:.3f} s | {ftot:.3f} s | {tot / ftot:.2f}{X} |"
        )
        print(
            f"| disk after 937 saves ({kinds.count(Kind.SNAPSHOT)} snapshots) | {disks[-1] / 1e6:.2f} MB | "
            f"{floor_disk / 1e6:.2f} MB | {disks[-1] / msgs_json:.2f}{X} messages' JSON ({msgs_json / 1e6:.2f} MB) |"
        )
        for row in loads(tmp, log, args.reps):
            print(row)
        for row in scan_10000(tmp, max(3, args.runs)):
            print(row)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
