"""Hostile input against every checkpointer, the HTTP checkpoint app and the AgentServer routes.

Only clear errors (TulipNBError subclasses, 4xx) may come out: no crash, no file outside the
store's directory, no SQL injection (the table still answers afterwards), no 5xx.
"""

from __future__ import annotations

import contextlib
import unicodedata
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tulip_nb.core import AgentState, Message
from tulip_nb.core.errors import CheckpointCorrupt, TulipNBError
from tulip_nb.memory.backends import FileCheckpointer, checkpointer_from_url
from tulip_nb.memory.checkpointer import BaseCheckpointer
from tulip_nb.memory.integrity import verify_thread

from .conftest import drop_table, record_figure, shared_url

NFC, NFD = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
HOSTILE_IDS = [
    "../escape",
    "../../etc/passwd",
    "a/../../b",
    "/abs/path",
    "..",
    ".",
    "x\x00y",
    "t" * 10_000,
    "t" * 4096,
    "x'; DROP TABLE checkpoints; --",
    'x"); DELETE FROM checkpoints; --',
    "x` OR 1=1 #",
    "%' OR '1'='1",
    "a:b:latest",
    "thread:_checkpoints",
    "*",
    "?[]",
    NFC,
    NFD,
    "\ufb01le",  # the "fi" ligature, NFKC-equal to "file"
    "file",
    "\u202egnp.exe",
    "\ud800",  # a lone surrogate: not encodable as UTF-8
    "spaces and\ttabs\nnewline",
    "emoji 🧪",
    "\x7f\x01",
]


@contextlib.asynccontextmanager
async def backend(kind: str, tmp_path: Path, redis_url: str) -> AsyncIterator[tuple[BaseCheckpointer, str]]:
    if kind == "s3":
        from tests.backends.factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket
        from tulip_nb.memory.backends._s3 import S3Backend

        cp: BaseCheckpointer = S3Backend(new_bucket(), endpoint_url=moto_endpoint(), **S3_CREDENTIALS)
        url = ""
    else:
        url = {"memory": "memory:", "file": f"file:{tmp_path / 'store'}", "redis": redis_url}.get(kind) or shared_url(
            kind
        )
        cp = checkpointer_from_url(url)
    try:
        yield cp, url
    finally:
        await cp.close()
        if kind in ("postgresql", "mysql"):
            await drop_table(url)


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize("kind", ["memory", "file", "redis", "postgresql", "mysql", "s3", "http"])
async def test_hostile_thread_ids(kind: str, tmp_path: Path, session_redis: Any) -> None:
    if kind == "http":
        from tests.backends.factories.remote import serve_app
        from tulip_nb.memory.backends.http import HTTPCheckpointer
        from tulip_nb.server import checkpoint_app

        inner = FileCheckpointer(tmp_path / "store")
        with serve_app(checkpoint_app(inner)) as base:
            async with HTTPCheckpointer(base) as cp:
                await _ids_against(cp, tmp_path)
        return
    async with backend(kind, tmp_path, session_redis.url + "?prefix=hostile:") as (cp, _):
        if kind != "s3":
            await _ids_against(cp, tmp_path)
            return
        # moto answers 404 to a key holding a newline: the history (keys by hash) holds such a
        # thread, and writing tulip's copy of it is a warning at each touch, never a lost save
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await _ids_against(cp, tmp_path)
        assert all("could not be written" in str(w.message) and "\n" in str(w.message) for w in caught), [
            str(w.message) for w in caught
        ]


async def _ids_against(cp: BaseCheckpointer, tmp_path: Path) -> None:
    outside = _tree(tmp_path.parent) - _tree(tmp_path)
    saved: dict[str, str] = {}
    tried = 0
    for tid in HOSTILE_IDS:
        state = AgentState(messages=[Message.user(f"for {tid[:30]!r}")])
        tried += 1
        try:
            await cp.save(state, tid)
        except TulipNBError:
            continue  # refused clearly (InvalidThreadId, or the store's own limit)
        saved[tid] = f"for {tid[:30]!r}"
    for tid, content in saved.items():  # every accepted id is its own thread: no aliasing
        loaded = await cp.load(tid)
        assert loaded is not None and loaded.messages[0].content == content, f"{tid[:40]!r} came back wrong"
        assert (await verify_thread(cp, tid)).ok
    if NFC in saved and NFD in saved:
        assert (await cp.load(NFC)).messages[0].content != (await cp.load(NFD)).messages[0].content  # type: ignore[union-attr]
    # the store still works for an ordinary thread (no injected DROP / DELETE took effect)
    await cp.save(AgentState(messages=[Message.user("still here")]), "ordinary")
    assert (await cp.load("ordinary")).messages[0].content == "still here"  # type: ignore[union-attr]
    for tid in saved:
        assert await cp.load(tid) is not None
    assert _tree(tmp_path.parent) - _tree(tmp_path) <= outside, "a file appeared outside the store"
    record_figure("hostile_inputs", tried)


@pytest.mark.parametrize("kind", ["memory", "file", "redis", "postgresql"])
async def test_hostile_states(kind: str, tmp_path: Path, session_redis: Any) -> None:
    async with backend(kind, tmp_path, session_redis.url + "?prefix=hostile2:") as (cp, _):
        big = AgentState(messages=[Message.user("x" * (10 << 20))])  # 10 MB in one message
        await cp.save(big, "big")
        assert len((await cp.load("big")).messages[0].content or "") == 10 << 20  # type: ignore[union-attr]
        nested: Any = "leaf"
        for _ in range(300):  # deeper than orjson's 255 levels
            nested = [nested]
        for meta in ({"deep": nested}, {"obj": object()}, {"nan": float("nan")}, {1: "int key"}):
            try:
                await cp.save(AgentState(metadata=meta), "odd", metadata=meta)
            except (TulipNBError, TypeError, ValueError) as e:
                assert str(e)  # a clear message, not a crash
            else:
                assert await cp.load("odd") is not None
        weird = AgentState(messages=[Message.user("\u0000\ud7ff\ue000\U0010ffff \\u0000 \"'`;--")])
        try:
            await cp.save(weird, "weird")
        except TulipNBError as e:  # PostgreSQL jsonb cannot hold \u0000: refused, said so, nothing stored
            assert kind == "postgresql" and "\\u0000" in str(e), e
            assert await cp.load("weird") is None
        else:
            assert (await cp.load("weird")).messages == weird.messages  # type: ignore[union-attr]
        record_figure("hostile_inputs", 7)


CORRUPT = [
    b"",
    b"{",
    b'{"checkpoint_id": "c", "thread_id": "t", "created_at": "2999-01-01T00:00:00+00:00", "state": {"messages": [',
    b"[]",
    b"null",
    b'"a string"',
    b'{"checkpoint_id": 1, "thread_id": "t", "created_at": "x", "state": {}}',
    b'{"checkpoint_id": "c", "thread_id": "t", "created_at": "2999-01-01T00:00:00+00:00", "state": {"messages": "no"}}',
    b'{"checkpoint_id": "c", "thread_id": "t", "created_at": "2999-01-01T00:00:00+00:00", "state": {"iteration": "x"}}',
    b'{"checkpoint_id": "c", "thread_id": "t", "created_at": "2999-01-01T00:00:00+00:00", "metadata": [], "state": {}}',
    b"\xff\xfe\x00garbage \xc3\x28",
    b'{"checkpoint_id": "c", "thread_id": "t", "created_at": "2999-01-01T00:00:00+00:00", '
    b'"state": {"messages": [{"role": "alien"}]}}',
    b"[" * 100_000,
]


async def test_corrupt_files_are_clear_errors_and_never_chosen(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    good = await cp.save(AgentState(messages=[Message.user("good")]), "t")
    for i, data in enumerate(CORRUPT):
        path = tmp_path / "t" / f"bad{i}.json"
        path.write_bytes(data)
        fresh = FileCheckpointer(tmp_path)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            ckpt = await fresh.load_checkpoint("t")
        assert ckpt is not None and ckpt.checkpoint_id == good, f"corrupt file {i} was chosen as latest"
        with pytest.raises((CheckpointCorrupt, TulipNBError)):
            await fresh.load_checkpoint("t", f"bad{i}")
        path.unlink()
    record_figure("hostile_inputs", len(CORRUPT))


# -- HTTP: checkpoint_app and AgentServer -----------------------------------------------------------
_bodies = st.one_of(
    st.binary(max_size=300),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=30),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
        max_leaves=15,
    ).map(
        lambda v: (
            orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY) if _dumpable(v) else b"{}"
        )
    ),
    st.fixed_dictionaries(
        {
            "state": st.dictionaries(
                st.sampled_from(["messages", "iteration", "metadata", "run_id", "x"]),
                st.none()
                | st.integers(-(2**63), 2**63 - 1)
                | st.text(max_size=5)
                | st.lists(st.integers(0, 9), max_size=2),
            )
        },
        optional={
            "checkpoint_id": st.text(max_size=20) | st.integers(0, 99),
            "metadata": st.none() | st.integers(0, 9) | st.dictionaries(st.text(max_size=5), st.integers(0, 9)),
        },
    ).map(orjson.dumps),
)
_paths = st.sampled_from(
    [
        "/threads/t/checkpoints",
        "/threads/%2e%2e%2fx/checkpoints",
        "/threads/a%00b/checkpoints",
        "/threads//checkpoints",
        "/threads/t/copy",
        "/vacuum",
        "/threads/t/checkpoints/c",
        "/threads/" + "x" * 5000 + "/checkpoints",
    ]
)


def _dumpable(v: Any) -> bool:
    try:
        orjson.dumps(v)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


GENERATED = settings(
    max_examples=examples(1.5), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
"""The generated-request tests' settings: 1.5 times the hypothesis profile's count of examples
(tests/conftest.py): 150 in ``ci``, as many as the busier of the two ran before the profiles."""


@pytest.fixture
def answered(request: pytest.FixtureRequest) -> Iterator[list[int]]:
    """Counts the generated requests a test saw answered, and checks the count at teardown.

    Each example appends once, after its assertions. When the test passed, every example the
    profile asks for must have been answered (fewer means hypothesis drew fewer inputs than the
    settings say: a strategy that rejects what it draws tests nothing), and the count is added to
    the ``hostile_inputs`` figure.
    """
    seen: list[int] = []
    failed_before = request.session.testsfailed
    yield seen
    if request.session.testsfailed > failed_before:
        return  # the test itself failed: its report says why
    assert len(seen) >= GENERATED.max_examples, (
        f"{request.node.name} answered {len(seen)} generated requests, the profile asks {GENERATED.max_examples}"
    )
    record_figure("hostile_inputs", len(seen))


@GENERATED
@given(
    body=_bodies,
    path=_paths,
    method=st.sampled_from(["POST", "GET", "DELETE"]),
    headers=st.sampled_from([{}, {"if-match": '"nope"'}, {"if-none-match": "*"}, {"x-tulip-nb-put": "verbatim"}]),
)
async def test_checkpoint_app_answers_4xx_to_anything(
    tmp_path: Path, answered: list[int], body: bytes, path: str, method: str, headers: dict[str, str]
) -> None:
    import httpx

    from tulip_nb.server import checkpoint_app

    app = checkpoint_app(FileCheckpointer(tmp_path / "store"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        resp = await client.request(method, path, content=body if method == "POST" else None, headers=headers)
        assert resp.status_code < 500, (resp.status_code, resp.text[:300])
        assert (await client.get("/health")).status_code == 200
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith("x") and p.is_file()]
    answered.append(1)


_agent_bodies = st.one_of(
    st.binary(max_size=200),
    st.fixed_dictionaries(
        {},
        optional={
            "prompt": st.none() | st.integers(0, 9) | st.text(max_size=50) | st.lists(st.text(max_size=3), max_size=2),
            "thread_id": st.none() | st.integers(0, 9) | st.sampled_from(HOSTILE_IDS[:12]) | st.text(max_size=30),
            "metadata": st.none()
            | st.integers(0, 9)
            | st.text(max_size=5)
            | st.dictionaries(st.text(max_size=5), st.integers(0, 9)),
            "response": st.none() | st.text(max_size=10) | st.integers(0, 9),
        },
    ).map(orjson.dumps),
)


@GENERATED
@given(
    body=_agent_bodies,
    route=st.sampled_from(["/invoke", "/resume", "/stream"]),
    tid=st.sampled_from([*HOSTILE_IDS[:12], "ok"]),
)
async def test_agent_server_answers_4xx_to_anything(
    tmp_path: Path, answered: list[int], body: bytes, route: str, tid: str
) -> None:
    from urllib.parse import quote

    import httpx

    from tests.server.conftest import make_agent
    from tulip_nb.server import AgentServer

    server = AgentServer(make_agent(checkpointer=FileCheckpointer(tmp_path / "store")), api_key=None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=server), base_url="http://t") as client:
        resp = await client.post(route, content=body, headers={"content-type": "application/json"})
        assert resp.status_code < 500 or resp.status_code in (502, 503), (route, resp.status_code, resp.text[:300])
        if resp.status_code >= 500:
            assert "Traceback" not in resp.text
        resp = await client.get(f"/threads/{quote(tid, safe='')}")
        assert resp.status_code in (200, 400, 404, 422), (tid, resp.status_code, resp.text[:200])
        assert (await client.get("/health")).status_code == 200
    answered.append(1)


# -- regressions: the bugs these suites found ---------------------------------------------------------
def test_regression_lone_surrogate_ids_are_refused() -> None:
    from tulip_nb.core.errors import InvalidThreadId
    from tulip_nb.memory.checkpointer import validate_checkpoint_id, validate_thread_id

    with pytest.raises(InvalidThreadId, match="surrogate"):
        validate_thread_id("a\ud800")
    with pytest.raises(InvalidThreadId, match="Unicode"):
        validate_checkpoint_id("c\udfff", "t")


def test_regression_envelope_metadata_must_be_an_object() -> None:
    from tulip_nb.memory._envelope import info_from_head

    head = {"checkpoint_id": "c", "thread_id": "t", "created_at": "2026-01-01T00:00:00+00:00"}
    assert info_from_head({**head, "metadata": None}, where="x").metadata == {}
    for bad in ([], "", 0, False):
        with pytest.raises(CheckpointCorrupt, match="metadata"):
            info_from_head({**head, "metadata": bad}, where="x")


async def test_regression_checkpoint_app_non_object_bodies_are_400(tmp_path: Path) -> None:
    import httpx

    from tulip_nb.server import checkpoint_app

    app = checkpoint_app(FileCheckpointer(tmp_path))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for path in ("/vacuum", "/threads/t/copy"):
            for body in (b"null", b"[]", b'"x"', b"1"):
                resp = await client.post(path, content=body)
                assert resp.status_code == 400, (path, body, resp.status_code)


async def test_regression_s3_write_answered_404_is_not_a_success() -> None:
    """moto answers 404 to a PUT whose key holds a newline: the save must not vanish."""
    from tests.backends.factories.remote import S3_CREDENTIALS, moto_endpoint, new_bucket
    from tulip_nb.memory.backends._s3 import S3Backend

    cp = S3Backend(new_bucket(), endpoint_url=moto_endpoint(), **S3_CREDENTIALS)
    try:
        # the history (keys by hash) commits; tulip's copy under the raw id is what moto refuses:
        # the save is acknowledged with a warning naming the failed write, and the thread loads
        with pytest.warns(RuntimeWarning, match="could not be written.*write an object"):
            await cp.save(AgentState(messages=[Message.user("x")]), "a\nb")
        with pytest.warns(RuntimeWarning, match="could not be written"):
            loaded = await cp.load("a\nb")
        assert loaded is not None and loaded.messages[0].content == "x"
    finally:
        await cp.close()
