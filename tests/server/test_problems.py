"""One owner for the error <-> HTTP status rule: the error classes (``http_status``) and
``core.errors.problem_from``; both servers answer with it and the HTTP client inverts it."""

from __future__ import annotations

import orjson
import pytest

from tulip_nb.agent._errors import NothingToResume, ResumeNeedsResponse
from tulip_nb.core.errors import (
    BackendUnavailable,
    CapabilityNotSupported,
    CheckpointConflict,
    CheckpointCorrupt,
    CheckpointNotFound,
    InvalidThreadId,
    TulipNBError,
    UserError,
    problem_from,
)
from tulip_nb.models._base import ModelError
from tulip_nb.server._agent_server import _problem_for
from tulip_nb.server._checkpoints import _from_exception

ERRORS: list[TulipNBError] = [
    UserError("bad", thread_id="t"),
    InvalidThreadId("empty id"),
    CheckpointNotFound("none", thread_id="t", checkpoint_id="c"),
    CheckpointConflict("moved on", expected="a", actual="b", thread_id="t"),
    BackendUnavailable("down", thread_id="t"),
    CapabilityNotSupported("X", "vacuum", "vacuum"),
    NothingToResume("nothing", thread_id="t"),
    ResumeNeedsResponse("answer it", thread_id="t"),
    ModelError("provider said no"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_both_servers_answer_with_the_class_status(error: TulipNBError) -> None:
    status, body = problem_from(error)
    assert status == type(error).http_status and body["error"] == type(error).__name__
    assert _problem_for(error, "t").status == status
    if not isinstance(error, NothingToResume | ResumeNeedsResponse | ModelError):  # agent-only errors
        response = _from_exception(error)
        assert response.status_code == status
        assert orjson.loads(response.body)["error"] == type(error).__name__


def test_statuses_are_the_documented_ones() -> None:
    got = {type(e).__name__: type(e).http_status for e in ERRORS}
    assert got == {
        "UserError": 400,
        "InvalidThreadId": 422,
        "CheckpointNotFound": 404,
        "CheckpointConflict": 409,
        "BackendUnavailable": 503,
        "CapabilityNotSupported": 501,
        "NothingToResume": 404,
        "ResumeNeedsResponse": 409,
        "ModelError": 502,
    }
    assert CheckpointCorrupt.http_status == 422 and TulipNBError.http_status == 500
    assert problem_from(ERRORS[3])[1] | {} == {
        "error": "CheckpointConflict",
        "message": "moved on",
        "thread_id": "t",
        "expected": "a",
        "actual": "b",
    }
