"""deepvm's state database and its locks: what the cluster table (provisioning.clusters.store) and the job table
(training.shared.jobstore) share. Each layer owns its tables; this module owns the file.

- One SQLite file, DEEPVM_HOME/state.db, in WAL mode with full sync: every change is one transaction, so
  a crash (or kill -9) mid-command leaves the last committed state, never a torn file; and WAL lets a
  second deepvm process (`status` while `up` runs) read without blocking the writer.
- Each layer declares its tables as a `Schema` with a version, kept per layer in the file's
  `schema_versions` table. Opening brings an older file up to date in one transaction: the tables and
  indexes are created if missing and columns added since a table's first version are added (a file from
  before this table existed was written by every earlier deepvm). A file written by a newer deepvm is
  refused rather than half-understood.
- A file that is not a usable database (truncated, garbage, a directory in its place, locked for too
  long) is one `StateFileError` saying which file and what to do, whichever query first runs into it,
  never a raw sqlite3 exception.
- Locks a command holds for its whole life (`up`/`down` on a cluster, a training controller) are flocks
  on files in DEEPVM_HOME/locks: the kernel drops them when the process dies however it dies, so "is it
  running" is a lock test, not a pid guess.
"""

from __future__ import annotations

import fcntl
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from provisioning.core.errors import DeepvmError, InputError
from provisioning.core.home import deepvm_home

_BUSY_TIMEOUT_S = 10.0  # how long a write waits for another process's transaction before giving up
_CHECKED: set[tuple[Path, int, int, int]] = set()  # files (path, inode, size, mtime) read through already
_HEADER_BYTES = 100  # an SQLite database file starts with a header of this size
_VERSIONS = "CREATE TABLE IF NOT EXISTS schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL)"


class StateFileError(InputError):
    """The state database cannot be used as it is; `problem` says what is wrong with which file."""

    def __init__(self, problem: str, advice: str) -> None:
        super().__init__(f"{problem}; {advice}")
        self.problem = problem


@dataclass(frozen=True)
class AddedColumn:
    """A column added to a table after its first version: files written before get it with its default."""

    table: str
    column: str
    definition: str  # e.g. "TEXT NOT NULL DEFAULT 'local'"


@dataclass(frozen=True)
class Schema:
    """One layer's tables in the state database."""

    name: str  # its row in schema_versions, e.g. "clusters"
    version: int  # raised with every change to the statements or the added columns
    statements: tuple[str, ...]  # the current tables and indexes, each CREATE ... IF NOT EXISTS
    added_columns: tuple[AddedColumn, ...] = ()


def state_path() -> Path:
    return deepvm_home() / "state.db"


class Database:
    """One connection to the state database, with `schema`'s tables up to date. Reads see the last
    committed state; every change goes through `transaction()`. Threads may share it: one query or
    transaction at a time."""

    def __init__(self, schema: Schema, path: Path | None = None) -> None:
        self.path = path or state_path()
        _check_file(self.path)
        with self._errors():
            self._db = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._lock = threading.RLock()
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._check_pages()
            self._migrate(schema)

    def read(self, sql: str, params: Sequence[object] = ()) -> list[sqlite3.Row]:
        """Every row the query selects."""
        with self._lock, self._errors():
            return self._db.execute(sql, params).fetchall()

    def read_one(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Row | None:
        """The query's first row, or None."""
        with self._lock, self._errors():
            return self._db.execute(sql, params).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside one write transaction (BEGIN IMMEDIATE: it waits for other writers up
        front, never halfway); committed at the end of the block, rolled back if the block raises."""
        with self._lock, self._errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _check_pages(self) -> None:
        """Read every page, once per process and version of the file (a few ms for a state of megabytes):
        a truncated file can still open and answer queries that touch no lost page, and writing into it
        loses more."""
        info = self.path.stat()
        key = (self.path.resolve(), info.st_ino, info.st_size, info.st_mtime_ns)
        if key in _CHECKED:
            return
        found = [row[0] for row in self._db.execute("PRAGMA quick_check").fetchall()]
        if found != ["ok"]:
            raise sqlite3.DatabaseError(f"database disk image is malformed: {found[0]}")
        _CHECKED.add(key)

    def _migrate(self, schema: Schema) -> None:
        if self._version(schema.name) == schema.version:
            return
        with self.transaction() as db:
            found = self._version(schema.name)  # again: another process may have done it meanwhile
            if found > schema.version:
                raise StateFileError(
                    f"{self.path} was written by a newer deepvm ({schema.name} tables version {found}, this one "
                    f"knows {schema.version})",
                    "upgrade deepvm to use it",
                )
            db.execute(_VERSIONS)
            for statement in schema.statements:
                db.execute(statement)
            for added in schema.added_columns:
                columns = {r["name"] for r in db.execute(f"PRAGMA table_info({added.table})")}
                if added.column not in columns:
                    db.execute(f"ALTER TABLE {added.table} ADD COLUMN {added.column} {added.definition}")
            db.execute("INSERT OR REPLACE INTO schema_versions VALUES (?, ?)", (schema.name, schema.version))

    def _version(self, name: str) -> int:
        """The version of `name`'s tables in the file (0: none, or a file from before versions were kept)."""
        try:
            found = self._db.execute("SELECT version FROM schema_versions WHERE name = ?", (name,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return 0
        return 0 if found is None else int(found[0])

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """sqlite3's errors about the file, as one StateFileError; errors of deepvm's own SQL (a
        constraint, a wrong statement) pass through: they are bugs to see, not a file to move aside."""
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise
        except sqlite3.DatabaseError as exc:
            raise _file_error(self.path, exc) from None


def _check_file(path: Path) -> None:
    """Refuse what SQLite would open as a new, empty database and then overwrite: a file too short to
    hold a database header (an empty file is a database not yet written), or something that is not a
    file at all. Looked at with stat() alone: opening and closing the file here would drop the POSIX
    locks this process's SQLite connections hold on it, and another process could then checkpoint and
    delete the WAL under them (sqlite.org/howtocorrupt.html, 2.2)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise StateFileError(f"{path} is not a file", _move_aside(path))
    if 0 < info.st_size < _HEADER_BYTES:
        raise StateFileError(f"{path} is damaged (only {info.st_size} bytes)", _move_aside(path))


def _move_aside(path: Path) -> str:
    return (
        f"move it aside (with any {path.name}-wal and {path.name}-shm beside it) and run again; "
        "a cluster it recorded can still be deleted by its tags: `deepvm down NAME`"
    )


def _file_error(path: Path, exc: sqlite3.DatabaseError) -> StateFileError:
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+; which I/O error says what went wrong
    reason = f"{exc}: {name}" if name.startswith("SQLITE_IOERR") else str(exc)
    if "locked" in reason or "busy" in reason:
        return StateFileError(f"{path} is locked by another deepvm process ({reason})", "run again when it is done")
    if "readonly" in reason or "unable to open" in reason:
        return StateFileError(
            f"cannot write {path} ({reason})", f"check that {path.parent} is a directory you may write to"
        )
    return StateFileError(f"{path} is damaged ({reason})", _move_aside(path))


# locks


def _lock_file(name: str) -> Path:
    locks = deepvm_home() / "locks"
    locks.mkdir(exist_ok=True, mode=0o700)
    return locks / f"{name}.lock"


@contextmanager
def exclusive_lock(name: str, busy: DeepvmError) -> Iterator[None]:
    """Hold the lock `name` for the block; `busy` is raised at once when another process holds it."""
    with open(_lock_file(name), "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise busy from None
        yield


def lock_held(name: str) -> bool:
    """True while some process holds the lock `name`."""
    with open(_lock_file(name), "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
