"""The ledger's journal: append-only local files of records the database has not taken yet.

Each writer appends to its own file, ``ledger-<random>.jsonl`` in the journal directory (created
0700; files 0600), one JSON record per line, each append written and ``fsync``-ed before it
returns, and holds an exclusive ``flock`` on it while it is the file being appended to. To
replay, a writer first releases its own file (the next append starts a new one), then claims
every file of the directory whose lock it can take — its own, and those of writers that are
gone (another worker, a process that crashed) — never one another live writer still appends
to. A claimed file is read in batches and deleted once every batch reached the database;
replaying it again after a failure is harmless because the database ignores ids it already has.

A line that cannot be decoded (the torn last line of a process killed mid-write) is skipped and
counted by the caller as dropped. Everything here is blocking file I/O on small amounts of data:
it runs only while the database is failing or being caught up with.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from proxy.governance.ledger.records import SpendRecord

JOURNAL_DIR = "ledger-journal"

_ENCODER = msgspec.json.Encoder()


def default_directory(database_file: Path | None) -> Path:
    """Where the journal goes when the config names no place: beside a SQLite database's
    file, else in ``$CROSSWAY_DATA_DIR`` (``./data``)."""
    if database_file is not None:
        return database_file.parent / JOURNAL_DIR
    return Path(os.environ.get("CROSSWAY_DATA_DIR") or "./data") / JOURNAL_DIR


class Journal:
    """The journal directory of one writer (see the module docstring). Not thread-safe.

    ``record_type`` is the record struct its lines decode to, ``prefix`` its files' names'
    start: the spend ledger's by default; other batching writers (the request logs) keep their
    own kind of record in files of their own prefix, in a directory of their own."""

    def __init__(
        self,
        directory: Path,
        record_type: type[msgspec.Struct] = SpendRecord,
        prefix: str = "ledger",
    ) -> None:
        self.directory = directory
        self._fd: int | None = None
        self._path: Path | None = None
        self._prefix = prefix
        self._pattern = f"{prefix}-*.jsonl"
        self._decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(record_type)

    def append(self, records: Sequence[msgspec.Struct]) -> None:
        """Append ``records`` durably. Raises :class:`OSError` when the file cannot be written
        (or synced): then what this append wrote is cut off again where the truncation
        succeeds, and the file is released, so that the caller's retry starts a new file
        instead of continuing a torn line."""
        if not records:
            return
        data = b"".join(_ENCODER.encode(record) + b"\n" for record in records)
        fd = self._open()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            self.release()
            raise

    def release(self) -> None:
        """Stop appending to the current file (the next append starts a new one)."""
        fd, self._fd, self._path = self._fd, None, None
        if fd is not None:
            os.close(fd)  # releases its lock

    def claim(self) -> list[Claimed]:
        """Every file no live writer appends to, locked for replay (oldest first); the caller
        must :meth:`Claimed.close` or :meth:`Claimed.finish` each."""
        self.release()
        claimed: list[Claimed] = []
        paths = (
            sorted(self.directory.glob(self._pattern), key=_age) if self.directory.is_dir() else []
        )
        for path in paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:  # replayed by another writer meanwhile
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # a live writer's file
                continue
            if not os.path.exists(path):  # deleted between open and lock
                os.close(fd)
                continue
            claimed.append(Claimed(path, fd, self._decoder))
        return claimed

    def has_files(self) -> bool:
        """Whether there is any journal file (claimable or not)."""
        return self.directory.is_dir() and any(self.directory.glob(self._pattern))

    def _open(self) -> int:
        if self._fd is not None:
            return self._fd
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.directory / f"{self._prefix}-{uuid.uuid4().hex}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd, self._path = fd, path
        return fd


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


class Claimed:
    """One journal file locked for replay."""

    def __init__(self, path: Path, fd: int, decoder: msgspec.json.Decoder[Any]) -> None:
        self.path = path
        self._fd = fd
        self._decoder = decoder
        self.torn = 0  # lines that could not be decoded
        self.lines = _count_lines(fd)
        """Its lines (records, and torn lines) when it was claimed."""

    def batches(self, size: int) -> Iterator[list[Any]]:
        """The file's records, ``size`` at a time (undecodable lines skipped, counted in
        :attr:`torn`)."""
        batch: list[Any] = []
        decode = self._decoder.decode
        with open(self._fd, "rb", closefd=False) as file:
            file.seek(0)
            for line in file:
                try:
                    batch.append(decode(line))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    self.torn += 1
                    continue
                if len(batch) >= size:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def finish(self) -> None:
        """Every record reached the database: delete the file."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.close()

    def close(self) -> None:
        """Give the file up (unreplayed, or partly): it can be claimed again."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _count_lines(fd: int) -> int:
    """The lines of the file open at ``fd`` (a last line without its newline counts)."""
    count = 0
    offset = 0
    last = b"\n"
    while chunk := os.pread(fd, 1 << 16, offset):
        count += chunk.count(b"\n")
        offset += len(chunk)
        last = chunk[-1:]
    return count + (last != b"\n")
