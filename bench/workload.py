"""The benchmark conversation of ``/work/shared/BENCH.md``: synthetic, seeded, deterministic.

A system prompt of ~2.7 kB, then turns: a user message of 40-800 characters (some with code),
0-3 tool rounds (an assistant message with 1-2 tool calls, then one tool result of 200-4000
characters each, log-uniform: source code, JSON rows, test logs, directory listings), and a final
answer of 100-2000 characters. The conversation is one endless seeded stream, so the sizes the
benchmarks use (20, 200, 2000 messages) are prefixes of one conversation.

>>> msgs = build_conversation(20)
>>> len(msgs), msgs[0].role, build_conversation(200)[:20] == msgs
(20, 'system', True)

``python -m bench.workload`` prints the statistics at 2000 messages next to BENCH.md's.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from tulip_nb.core import AgentState, Message, state_json_bytes

__all__ = [
    "SIZES",
    "build_conversation",
    "build_state",
    "conversation_stats",
    "iteration_ends",
    "save_sources",
    "to_tulip_messages",
    "to_tulip_state",
]

SIZES: tuple[int, ...] = (20, 200, 2000)

# BENCH.md's figures at 2000 messages, printed beside ours.
REFERENCE_2000 = {
    "user_turns": 372,
    "model_calls": 936,
    "tool_results": 691,
    "chars": 1_350_000,
    "json_bytes": 1_550_000,
}

_EPOCH = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

# The stream for seed s is random.Random(s + _SALT). Any salt gives the same distributions; 42 is
# the one (of 60 tried) whose seed-0 stream lands nearest BENCH.md's counts at 2000 messages.
_SALT = 42

_WORDS = (  # noqa: SIM905 - a word list reads better as text
    "agent thread checkpoint state message tool call result model token budget cache index "
    "request response server client queue worker retry timeout deadline payload schema field "
    "value record row table column query filter order limit offset cursor page batch stream "
    "event handler hook listener config option setting default override version release branch "
    "commit merge diff patch file path directory module package import export function method "
    "class object instance attribute property argument parameter return raise error exception "
    "warning log trace span metric counter gauge histogram latency throughput memory disk "
    "network socket connection pool lock mutex thread process signal pipe buffer encode decode "
    "parse serialise validate normalise compress encrypt hash sign verify refund order invoice "
    "customer account user session login logout permission role tenant region zone cluster node "
    "replica shard partition snapshot backup restore migrate upgrade rollback deploy build test "
    "fixture mock stub assert expect compare equal greater smaller first last next previous "
    "the a an of to in for on with from by at as is are was be this that these those it its "
    "we you they should would could will can may must not only also then when while because "
    "so but and or if else unless until after before during between within without across"
).split()

_TOOLS = {
    "code": ("read_file", "path"),
    "json": ("query_db", "sql"),
    "tests": ("run_tests", "target"),
    "listing": ("list_dir", "path"),
}
_KINDS = tuple(_TOOLS)
_EXTS = ("py", "ts", "go", "rs", "md", "json", "yaml", "toml", "sql", "txt")
_STATUSES = ("open", "paid", "refunded", "pending", "failed", "shipped", "cancelled")


class _Gen:
    """Text generators over one seeded RNG (every call advances the stream)."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.n_call = 0

    # -- sizes --------------------------------------------------------------------------------
    def log_uniform(self, lo: int, hi: int) -> int:
        return int(math.exp(self.r.uniform(math.log(lo), math.log(hi))))

    def uniform(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    # -- pieces -------------------------------------------------------------------------------
    def word(self) -> str:
        return self.r.choice(_WORDS)

    def ident(self) -> str:
        return f"{self.word()}_{self.word()}"

    def path(self) -> str:
        depth = self.r.randint(1, 4)
        return "/".join(self.word() for _ in range(depth)) + "." + self.r.choice(_EXTS)

    def sentence(self) -> str:
        words = [self.word() for _ in range(self.r.randint(6, 18))]
        text = " ".join(words)
        if self.r.random() < 0.15:
            text += f" (see `{self.ident()}`)"
        return text[0].upper() + text[1:] + self.r.choice(".....?!")

    def prose(self, n: int) -> str:
        parts: list[str] = []
        size = 0
        while size < n:
            para = " ".join(self.sentence() for _ in range(self.r.randint(2, 5)))
            if self.r.random() < 0.2:
                para = "\n".join(f"- {self.sentence()}" for _ in range(self.r.randint(2, 4)))
            parts.append(para)
            size += len(para) + 2
        return _cut("\n\n".join(parts), n)

    def code(self, n: int) -> str:
        lines: list[str] = []
        size = 0
        while size < n:
            name, a, b = self.ident(), self.word(), self.word()
            block = [
                f"def {name}({a}: str, {b}: int = {self.r.randint(0, 99)}) -> dict[str, object]:",
                f'    """{self.sentence()}"""',
                f'    result = {{"{a}": {a}, "count": {b} * {self.r.randint(2, 9)}}}',
                f"    if not {a}:",
                f'        raise ValueError(f"empty {a}: {{{b}!r}}")',
                f"    for item in {self.ident()}({a}):",
                f'        result[item.{self.word()}] = item.get("{self.word()}", None)  # {self.sentence()}',
                "    return result",
                "",
            ]
            if self.r.random() < 0.3:
                block.insert(0, f"@{self.word()}")
            lines.extend(block)
            size += sum(len(x) + 1 for x in block)
        return _cut("\n".join(lines), n)

    def json_rows(self, n: int) -> str:
        rows: list[bytes] = []
        size = 2
        i = self.r.randint(1, 9000)
        while size < n:
            row = {
                "id": i,
                "customer": f"{self.word()} {self.word()}",
                "status": self.r.choice(_STATUSES),
                "amount": round(self.r.uniform(1, 999), 2),
                "created_at": (_EPOCH + timedelta(minutes=self.r.randint(0, 10**6))).isoformat(),
                "note": self.sentence(),
            }
            rows.append(orjson.dumps(row))
            size += len(rows[-1]) + 2
            i += 1
        return _cut("[" + ",\n ".join(r.decode() for r in rows) + "]", n)

    def test_log(self, n: int) -> str:
        lines = ["============ test session starts ============ platform linux -- Python 3.11.7"]
        size = len(lines[0])
        pct = 0
        while size < n:
            pct = min(100, pct + self.r.randint(1, 7))
            outcome = "PASSED" if self.r.random() < 0.85 else "FAILED"
            line = f"tests/test_{self.word()}.py::test_{self.ident()} {outcome} [{pct:3d}%]"
            if outcome == "FAILED" and self.r.random() < 0.5:
                line += (
                    f"\n    def test_{self.ident()}():\n>       assert {self.word()}({self.r.randint(0, 9)}) == "
                    f"{{'{self.word()}': {self.r.randint(0, 99)}}}\nE       AssertionError: {self.sentence()}"
                )
            lines.append(line)
            size += len(line) + 1
        return _cut("\n".join(lines), n)

    def listing(self, n: int) -> str:
        lines = [f"total {self.r.randint(8, 4000)}"]
        size = len(lines[0])
        while size < n:
            kind = "d" if self.r.random() < 0.2 else "-"
            stamp = (_EPOCH + timedelta(minutes=self.r.randint(0, 10**5))).strftime("%b %d %H:%M")
            line = f"{kind}rw-r--r--  1 dev  staff  {self.r.randint(0, 10**6):>8}  {stamp}  {self.path()}"
            lines.append(line)
            size += len(line) + 1
        return _cut("\n".join(lines), n)

    def tool_output(self, kind: str, n: int) -> str:
        return {"code": self.code, "json": self.json_rows, "tests": self.test_log, "listing": self.listing}[kind](n)

    def call_id(self) -> str:
        return f"call_{self.r.getrandbits(48):012x}"

    def arguments(self, kind: str) -> dict[str, Any]:
        key = _TOOLS[kind][1]
        if kind == "json":
            table, status = self.word(), self.r.choice(_STATUSES)
            limit = self.r.randint(5, 50)
            return {key: f"SELECT * FROM {table}s WHERE status = '{status}' LIMIT {limit}"}
        if kind == "tests":
            return {key: f"tests/test_{self.word()}.py", "verbose": self.r.random() < 0.5}
        return {key: self.path()}

    # -- messages -----------------------------------------------------------------------------
    def system_prompt(self) -> str:
        head = "You are a careful coding agent working in a customer-support code base. "
        return head + self.prose(2700 - len(head))

    def user_text(self) -> str:
        n = self.log_uniform(40, 800)
        if n > 200 and self.r.random() < 0.3:
            lead = self.prose(max(30, n // 3))
            return _cut(f"{lead}\n\n```python\n{self.code(n)}\n```", n)
        return self.prose(n)

    def answer_text(self) -> str:
        n = self.uniform(100, 2000)
        if n > 600 and self.r.random() < 0.25:
            lead = self.prose(n // 2)
            return _cut(f"{lead}\n\n```python\n{self.code(n // 2)}\n```", n)
        return self.prose(n)


def _cut(text: str, n: int) -> str:
    return text[:n]


def _stream(seed: int, n: int) -> list[dict[str, Any]]:
    """The first ``n`` messages of the seeded conversation, as tulip-format dicts."""
    g = _Gen(seed + _SALT)
    out: list[dict[str, Any]] = [{"role": "system", "content": g.system_prompt()}]
    while len(out) < n:
        out.append({"role": "user", "content": g.user_text()})
        for _ in range(g.r.randint(0, 3)):
            calls = []
            for _ in range(2 if g.r.random() < 0.225 else 1):
                kind = g.r.choice(_KINDS)
                calls.append((kind, {"id": g.call_id(), "name": _TOOLS[kind][0], "arguments": g.arguments(kind)}))
            out.append({"role": "assistant", "content": None, "tool_calls": [c for _, c in calls]})
            for kind, call in calls:
                text = g.tool_output(kind, g.log_uniform(200, 4000))
                out.append({"role": "tool", "content": text, "tool_call_id": call["id"], "name": call["name"]})
        out.append({"role": "assistant", "content": g.answer_text()})
    return out[:n]


_CACHE: dict[int, list[dict[str, Any]]] = {}


def _dicts(n: int, seed: int) -> list[dict[str, Any]]:
    have = _CACHE.get(seed)
    if have is None or len(have) < n:
        have = _stream(seed, max(n, 2000))
        _CACHE[seed] = have
    return have[:n]


def build_conversation(n_messages: int, seed: int = 0) -> list[Message]:
    """The first ``n_messages`` messages of the seeded conversation, as fresh tulip_nb messages.

    Every call builds new :class:`Message` objects (no JSON cached yet), so a benchmark can tell a
    cold save from one whose messages were saved before.
    """
    return [Message.model_validate(d) for d in _dicts(n_messages, seed)]


def build_state(n: int, seed: int = 0, messages: list[Message] | None = None) -> AgentState:
    """An :class:`AgentState` as an agent would save it after ``n`` messages of the conversation.

    Besides the messages it carries the last turn's bookkeeping (iteration, tool executions,
    token counters) and some application metadata, with fixed stamps and ids so the bytes are
    deterministic. Pass ``messages`` to reuse message objects (their cached JSON with them).
    """
    msgs = messages if messages is not None else build_conversation(n, seed)
    last_user = max((i for i, m in enumerate(msgs) if m.role == "user"), default=0)
    turn = msgs[last_user:]
    calls = {c.id: c for m in turn for c in m.tool_calls}
    executions = [
        {
            "tool_name": m.name or "",
            "tool_call_id": m.tool_call_id or "",
            "arguments": calls[m.tool_call_id].arguments if m.tool_call_id in calls else {},
            "result": m.content,
            "duration_ms": 12.5,
            "timestamp": _EPOCH + timedelta(seconds=i),
        }
        for i, m in enumerate(turn)
        if m.role == "tool"
    ]
    n_calls = sum(1 for m in msgs if m.role == "assistant")
    return AgentState(
        run_id=f"{seed:08x}{len(msgs):024x}",
        agent_id="bench-agent",
        messages=msgs,
        iteration=sum(1 for m in turn if m.role == "assistant"),
        tool_executions=executions,
        tool_history=[e["tool_name"] for e in executions],
        total_tokens_used=1500 * n_calls,
        prompt_tokens_used=1400 * n_calls,
        completion_tokens_used=100 * n_calls,
        metadata={"user_id": "u-42", "project": "refunds", "bench": True},
        started_at=_EPOCH,
        updated_at=_EPOCH + timedelta(minutes=len(msgs)),
    )


def iteration_ends(messages: list[Message]) -> list[int]:
    """Prefix lengths at which an agent saves "after every iteration" (one per model call).

    An iteration is one assistant message plus the tool results that answer it, so a save point
    is just before the next user or assistant message (and at the end).
    """
    ends = []
    for i, m in enumerate(messages):
        if i and m.role in ("user", "assistant") and messages[i - 1].role in ("assistant", "tool"):
            ends.append(i)
    if messages and messages[-1].role in ("assistant", "tool"):
        ends.append(len(messages))
    return ends


def save_sources(messages: list[Message], ends: list[int] | None = None) -> list[str]:
    """The ``source`` an agent gives each save point of :func:`iteration_ends` (or of ``ends``).

    ``"final"`` at the end of a user turn (a save point followed by a user message, or the last
    one), ``"iteration"`` for a save inside a turn, as the agent's loop saves them.
    """
    ends = iteration_ends(messages) if ends is None else ends
    return ["final" if end >= len(messages) or messages[end].role == "user" else "iteration" for end in ends]


# -- the peer: tulip-agents' own objects ----------------------------------------------------------
def to_tulip_state(state: AgentState) -> Any:
    """The same state as a tulip-agents ``AgentState`` (built from tulip_nb's JSON, as tulip loads it)."""
    from tulip.core.state import AgentState as TulipAgentState

    return TulipAgentState.model_validate(orjson.loads(state_json_bytes(state)))


def to_tulip_messages(messages: list[Message]) -> list[Any]:
    """The same messages as tulip-agents ``Message`` objects."""
    from tulip.core.messages import Message as TulipMessage

    return [TulipMessage.model_validate(orjson.loads(m.json_bytes())) for m in messages]


# -- statistics -----------------------------------------------------------------------------------
def conversation_stats(messages: list[Message]) -> dict[str, int]:
    """Counts BENCH.md quotes: user turns, model calls, tool results, characters, JSON bytes."""
    return {
        "messages": len(messages),
        "user_turns": sum(1 for m in messages if m.role == "user"),
        "model_calls": sum(1 for m in messages if m.role == "assistant"),
        "tool_results": sum(1 for m in messages if m.role == "tool"),
        "chars": sum(len(m.content or "") for m in messages),
        "json_bytes": len(b"[" + b",".join(m.json_bytes() for m in messages) + b"]"),
        "system_prompt_chars": len(messages[0].content or "") if messages else 0,
    }


def _main() -> None:
    msgs = build_conversation(2000)
    stats = conversation_stats(msgs)
    print("| at 2000 messages | this workload | BENCH.md |")
    print("|---|---:|---:|")
    for key, value in stats.items():
        ref = REFERENCE_2000.get(key)
        print(f"| {key} | {value:,} | {f'{ref:,}' if ref else ''} |")
    print(f"| state JSON (bytes) | {len(state_json_bytes(build_state(2000))):,} | |")
    print(f"| save points (iterations) | {len(iteration_ends(msgs)):,} | 936 |")


if __name__ == "__main__":
    _main()
