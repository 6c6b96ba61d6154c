"""Shared test configuration: service gating, hypothesis profiles and the sample tulip checkpoint.

Environment: ``TULIP_NB_REQUIRE_SERVICES=1`` (CI) fails a test whose server is unreachable instead
of skipping it; ``TULIP_NB_NO_SERVICES=1`` (``make quick``) skips every test that asks for one;
``HYPOTHESIS_PROFILE`` (``dev`` or ``ci``) picks how many examples property tests run.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
SAMPLE_CHECKPOINT = Path(__file__).parent / "data" / "tulip-sample-checkpoint.json"

REQUIRE_SERVICES = os.environ.get("TULIP_NB_REQUIRE_SERVICES") == "1"
NO_SERVICES = os.environ.get("TULIP_NB_NO_SERVICES") == "1"
"""Set by ``make quick``: every external service counts as unreachable, so a test that needs one skips
(tests marked ``service`` are deselected there too; this catches one that is not marked)."""
if REQUIRE_SERVICES and NO_SERVICES:
    raise pytest.UsageError("TULIP_NB_REQUIRE_SERVICES=1 and TULIP_NB_NO_SERVICES=1 contradict each other")


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip (or, with TULIP_NB_REQUIRE_SERVICES=1, fail) when a service is unreachable."""
    if NO_SERVICES:
        pytest.skip(f"{name}: TULIP_NB_NO_SERVICES=1 (make quick)")
    if port_open(host, port):
        return
    reason = f"{name} is not reachable on {host}:{port}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{reason} and TULIP_NB_REQUIRE_SERVICES=1", pytrace=False)
    pytest.skip(reason)


# -- hypothesis profiles ------------------------------------------------------------------------
# How many examples a property test runs is the profile's, never the test's:
#   ci   derandomised (the same examples every run), 100 examples: `make test`, `.ci/run`, CI=true
#   dev  10 fresh random examples, failures kept in .hypothesis/ and replayed first: `make quick`
# HYPOTHESIS_PROFILE picks one; without it, "ci" when CI is set, else "dev". A test whose examples
# are expensive states a relative weight with `examples(share)`, never an absolute count.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile(
    "ci", max_examples=100, derandomize=True, deadline=None, database=None, print_blob=True
)
_hypothesis_settings.register_profile("dev", max_examples=10, deadline=None, print_blob=True)


def hypothesis_profile(environ: Mapping[str, str] = os.environ) -> str:
    """The profile to load: ``HYPOTHESIS_PROFILE``, else ``ci`` when ``CI`` is set (and not false), else ``dev``."""
    if environ.get("HYPOTHESIS_PROFILE"):
        return environ["HYPOTHESIS_PROFILE"]
    return "ci" if environ.get("CI", "").lower() not in ("", "0", "false", "no") else "dev"


_hypothesis_settings.load_profile(hypothesis_profile())


def examples(share: float) -> int:
    """``share`` of the loaded profile's ``max_examples`` (at least 1), for ``@settings(max_examples=...)``.

    For a property test whose examples are expensive: ``examples(0.1)`` is 10 in ``ci``, 1 in ``dev``.
    """
    return max(1, round(_hypothesis_settings.default.max_examples * share))
