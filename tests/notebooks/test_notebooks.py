"""The notebooks in notebooks/ run top to bottom (nbval, in a subprocess) and, in a fresh
virtualenv built from binder/requirements.txt, the way Binder would run them.

Why a subprocess: nbval is a pytest plugin that collects ``.ipynb`` files; running it as its own
pytest process keeps the notebooks out of this session's collection (``pytest`` alone still
collects only ``tests/``), lets us set the export URLs in the kernel's environment, and keeps the
kernel's warnings out of ``filterwarnings=error`` (each notebook cell still fails on an error).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, require_service

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
NBVAL = [
    "--nbval-lax",
    "--nbval-current-env",
    "--nbval-sanitize-with",
    "tests/nbval_sanitize.cfg",
]


def _export_env() -> dict[str, str]:
    """The URLs notebook 05 exports to: PostgreSQL (the local test server) and S3 on moto."""
    from tests.backends.factories.remote import S3_CREDENTIALS, moto_endpoint

    require_service("PostgreSQL", "127.0.0.1", 5432)
    endpoint = moto_endpoint()
    bucket = f"tnb-notebooks-{uuid.uuid4().hex[:12]}"
    return {
        "TULIP_NB_EXPORT_POSTGRES_URL": PG_URL,
        "TULIP_NB_EXPORT_S3_URL": f"s3://{bucket}/threads/?endpoint_url={endpoint}&region_name=us-east-1",
        "AWS_ACCESS_KEY_ID": S3_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": S3_CREDENTIALS["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def test_every_notebook_is_tested() -> None:
    names = [p.stem for p in NOTEBOOKS]
    assert names == [
        "01_quickstart",
        "02_step_and_replay",
        "03_what_if_branching",
        "04_tuning_compaction",
        "05_export_to_backends",
        "06_long_threads",
        "07_corpus",
        "08_live_models",
    ]
    assert (ROOT / "notebooks" / "data" / "08_live_models.sqlite").is_file()  # 08 re-runs from its cache
    assert (ROOT / "tests" / "nbval_sanitize.cfg").is_file()


@pytest.mark.slow
@pytest.mark.service("postgresql")
def test_notebooks_run_with_nbval_and_export_for_real() -> None:
    urls = _export_env()
    offline = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}  # 08 runs from its cache
    env = {**offline, **urls, "PYTHONWARNINGS": "default"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *NBVAL, "notebooks/"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t0
    print(f"nbval over {len(NOTEBOOKS)} notebooks: {took:.1f} s")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " passed" in out.stdout and "failed" not in out.stdout
    # notebook 05 really exported: the threads are in PostgreSQL and in the S3 bucket
    wanted = {"ticket-4821", "ticket-4822", "ticket-4823"}
    for name in ("TULIP_NB_EXPORT_POSTGRES_URL", "TULIP_NB_EXPORT_S3_URL"):
        assert wanted <= set(_threads_at(urls[name], env)), name


def _threads_at(url: str, env: dict[str, str]) -> list[str]:
    from tulip_nb.agent import run_sync
    from tulip_nb.memory.backends import checkpointer_from_url

    async def read() -> list[str]:
        cp = checkpointer_from_url(url, **_s3_options(url, env))
        try:
            return list(await cp.list_threads(pattern="ticket-*"))
        finally:
            await cp.close()

    return run_sync(read())


def _s3_options(url: str, env: dict[str, str]) -> dict[str, str]:
    if not url.startswith("s3://"):
        return {}
    return {"aws_access_key_id": env["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}


@pytest.mark.slow
def test_notebooks_run_in_a_fresh_binder_virtualenv(tmp_path: Path) -> None:
    """Binder's install, stood in for: a fresh venv, ``pip install -r binder/requirements.txt``
    from the repository root (offline here: the local package mirror), postBuild, then every
    notebook executed with nbclient in that venv's own kernel."""
    venv = tmp_path / "binder-venv"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "-r", "binder/requirements.txt"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert pip.returncode == 0, pip.stdout[-4000:] + pip.stderr[-4000:]
    installed = time.perf_counter() - t0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TULIP_NB_EXPORT_", "VIRTUAL_ENV", "OPENAI_"))}
    env["TULIP_NB_NOTEBOOK_DATA"] = str(ROOT / "notebooks" / "data")  # the kernels run in tmp_path
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(["bash", str(ROOT / "binder" / "postBuild")], cwd=ROOT, env=env, check=True, timeout=300)
    runner = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "for path in sys.argv[1:]:\n"
        "    nb = nbformat.read(path, as_version=4)\n"
        "    NotebookClient(nb, timeout=600, kernel_name='python3').execute()\n"
        "    print('ok', path, flush=True)\n"
    )
    t1 = time.perf_counter()
    run = subprocess.run(
        [str(py), "-c", runner, *map(str, NOTEBOOKS)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    executed = time.perf_counter() - t1
    print(f"binder venv: install {installed:.0f} s, notebooks {executed:.0f} s")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-6000:]
    assert run.stdout.count("ok ") == len(NOTEBOOKS)
