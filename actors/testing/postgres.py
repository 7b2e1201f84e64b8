"""A throwaway PostgreSQL server for tests and benchmarks: its own data directory, port and end.

    with ThrowawayPostgres() as pg:
        store = open_store(pg.url())

``initdb`` makes a cluster in a temporary directory and ``pg_ctl`` starts it, listening on
``host`` only (``127.0.0.1`` by default, or an address the caller's network namespaces
reach, whose subnets it then trusts) on a free port, with a socket directory of its own. PostgreSQL refuses to run as
root, so when this process is root the server runs as an unprivileged user (``postgres``,
which Debian's package creates, unless ``user`` says otherwise) that owns the directory.
Leaving the block stops the server (``pg_ctl stop -m immediate``) and removes everything.

For fault tests: ``crash`` and ``start`` (a restart on the same port and data), ``pause`` and
``resume`` (SIGSTOP), and ``standby()``: a streaming standby of this server (``pg_basebackup
-R``) on a port of its own, synchronous by default, which ``promote`` makes a primary.

``binaries()`` finds ``initdb`` and ``pg_ctl`` (in ``$GREENROOM_POSTGRES_BIN`` when it is set,
else on ``PATH`` or in ``/usr/lib/postgresql/*/bin``); None when PostgreSQL is not installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

__all__ = ["ThrowawayPostgres", "binaries"]


def binaries() -> tuple[str, str] | None:
    """``(initdb, pg_ctl)``, or None when PostgreSQL's server is not installed."""
    chosen = os.environ.get("GREENROOM_POSTGRES_BIN")
    if chosen:  # this directory, or nothing
        pair = os.path.join(chosen, "initdb"), os.path.join(chosen, "pg_ctl")
        return pair if all(os.access(p, os.X_OK) for p in pair) else None
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is not None and pg_ctl is not None:
        return os.path.realpath(initdb), os.path.realpath(pg_ctl)
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        initdb, pg_ctl = os.path.join(directory, "initdb"), os.path.join(directory, "pg_ctl")
        if os.access(initdb, os.X_OK) and os.access(pg_ctl, os.X_OK):
            return initdb, pg_ctl
    return None


def _free_port(host: str) -> int:
    from ..lifecycle.processes import free_port

    return free_port(host)


class ThrowawayPostgres:
    """A PostgreSQL server of its own; see the module docstring."""

    def __init__(
        self, host: str = "127.0.0.1", user: str = "postgres", database: str = "greenroom", password: str | None = None
    ) -> None:
        self.host = host
        self.port = 0
        self.database = database
        self.password = password
        self._run_as = user if os.geteuid() == 0 else None
        self._dir: Path | None = None
        self._standbys: list[ThrowawayPostgres] = []

    def url(self, database: str | None = None) -> str:
        secret = f":{quote(self.password, safe='')}" if self.password else ""
        return f"postgresql://greenroom{secret}@{self.host}:{self.port}/{database or self.database}"

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self._run_as, "--", *args] if self._run_as else list(args)

    def __enter__(self) -> ThrowawayPostgres:
        found = binaries()
        if found is None:
            raise RuntimeError("PostgreSQL is not installed (no initdb and pg_ctl on PATH or in /usr/lib/postgresql)")
        initdb = found[0]
        self._dir = Path(tempfile.mkdtemp(prefix="greenroom-pg-"))
        if self._run_as:
            entry = pwd.getpwnam(self._run_as)
            os.chown(self._dir, entry.pw_uid, entry.pw_gid)
        data, sockets = self._dir / "data", self._dir
        self.port = _free_port(self.host)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "timeout": 120, "check": True}
        auth = ["--auth=trust"]
        if self.password:
            pwfile = self._dir / "pwfile"
            pwfile.write_text(self.password + "\n")
            if self._run_as:
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        try:
            subprocess.run(self._cmd(initdb, "-D", str(data), "-U", "greenroom", *auth, "-E", "UTF8"), **quiet)  # type: ignore[call-overload]
            self._options = f"-c listen_addresses={self.host} -p {self.port} -k {sockets} -c fsync=off"
            if self.host not in ("127.0.0.1", "localhost", "::1"):  # the nodes of a test's own network
                with open(data / "pg_hba.conf", "a") as hba:
                    hba.write("host all all samenet trust\n")
            self.start()
            self.create_database(self.database)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    # -- faults: the server crashed, started again, paused ---------------------------------------

    def start(self) -> None:
        """Start the server (again, after ``crash``: same data, same port), waiting until it accepts."""
        assert self._dir is not None
        found = binaries()
        assert found is not None
        data, logfile = self._dir / "data", self._dir / "log"
        start = [found[1], "-D", str(data), "-o", self._options, "-l", str(logfile), "-w", "-t", "60", "start"]
        subprocess.run(self._cmd(*start), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, check=True)

    def crash(self) -> None:
        """Stop the server as a crash does (``pg_ctl stop -m immediate``: no checkpoint, every
        connection cut); ``start`` brings it back with what it had committed."""
        assert self._dir is not None
        found = binaries()
        assert found is not None
        stop = [found[1], "-D", str(self._dir / "data"), "-m", "immediate", "-w", "-t", "30", "stop"]
        subprocess.run(self._cmd(*stop), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60, check=True)

    def processes(self) -> list[int]:
        """The postmaster and every process under it."""
        from ..lifecycle.processes import descendants

        assert self._dir is not None
        pid = int((self._dir / "data" / "postmaster.pid").read_text().split()[0])
        return [pid, *descendants(pid)]

    def pause(self) -> list[int]:
        """SIGSTOP the server's processes: it still answers TCP (the kernel does), and nothing
        else, until ``resume``; the processes stopped."""
        stopped = self.processes()
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        return stopped

    def resume(self, stopped: list[int]) -> None:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def create_database(self, name: str) -> str:
        """A new, empty database on this server (``CREATE DATABASE``, through psycopg); its URL."""
        import psycopg
        from psycopg import sql

        assert self._dir is not None
        with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=30) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def standby(self, synchronous: bool = True) -> ThrowawayPostgres:
        """A streaming standby of this server, started, on a port of its own (its data under
        this server's directory, removed with it). ``synchronous``: this server commits only
        once the standby has the commit (``synchronous_standby_names = '*'``)."""
        assert self._dir is not None
        found = binaries()
        assert found is not None
        standby = ThrowawayPostgres(self.host, database=self.database, password=self.password)
        standby._run_as = self._run_as
        standby._dir = self._dir / f"standby{len(self._standbys)}"
        standby._dir.mkdir()
        if self._run_as:
            entry = pwd.getpwnam(self._run_as)
            os.chown(standby._dir, entry.pw_uid, entry.pw_gid)
        standby.port = _free_port(self.host)
        standby._options = f"-c listen_addresses={self.host} -p {standby.port} -k {standby._dir} -c fsync=off"
        conninfo = f"host={self.host} port={self.port} user=greenroom" + (f" password={self.password}" if self.password else "")
        backup = os.path.join(os.path.dirname(found[1]), "pg_basebackup")
        copy = [backup, "-d", conninfo, "-D", str(standby._dir / "data"), "-R", "-X", "stream", "-c", "fast"]
        subprocess.run(self._cmd(*copy), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, check=True)
        self._standbys.append(standby)
        standby.start()
        if synchronous:
            import psycopg

            with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=30) as conn:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
                for _ in range(600):  # the standby says it is in sync within a few seconds
                    if conn.execute("SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone():
                        break
                    conn.execute("SELECT pg_sleep(0.05)")
                else:
                    raise RuntimeError("the standby did not become synchronous within 30 s")
        return standby

    def promote(self) -> None:
        """Make this standby a primary (``pg_ctl promote``), waiting until it accepts writes."""
        assert self._dir is not None
        found = binaries()
        assert found is not None
        promote = [found[1], "-D", str(self._dir / "data"), "-w", "-t", "60", "promote"]
        subprocess.run(self._cmd(*promote), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120, check=True)

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        if self._dir is None:
            return
        for standby in self._standbys:
            standby._stop()
        self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None

    def _stop(self) -> None:
        found = binaries()
        if found is not None and self._dir is not None and (self._dir / "data" / "postmaster.pid").exists():
            stop = [found[1], "-D", str(self._dir / "data"), "-m", "immediate", "-w", "-t", "30", "stop"]
            subprocess.run(self._cmd(*stop), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
