"""Shared test configuration: service gating and the sample tulip checkpoint."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
SAMPLE_CHECKPOINT = Path(__file__).parent / "data" / "tulip-sample-checkpoint.json"

REQUIRE_SERVICES = os.environ.get("TULIP_NB_REQUIRE_SERVICES") == "1"


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or, with TULIP_NB_REQUIRE_SERVICES=1, fail) when a service is unreachable."""
    if port_open(host, port):
        return
    reason = f"{name} is not reachable on {host}:{port}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} and TULIP_NB_REQUIRE_SERVICES=1", pytrace=False)
    pytest.skip(reason)


# -- hypothesis profiles: "ci" (derandomised: the same examples every run) is the default; pass
# HYPOTHESIS_PROFILE=dev for fresh random examples. Each test sets its own max_examples.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
_hypothesis_settings.register_profile("dev", deadline=None)
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
