"""The trace reporter's on-disk spool: traces survive SIGTERM, kill -9 and restarts.

Layout: one directory, segment files ``<time_ns>-<pid>-<seq>.spool``, each a sequence of
records::

    MAGIC (4 bytes) | data length (u32 LE) | crc32 of id+data (u32 LE) | id length (u16 LE)
    | request id (UTF-8) | trace (wire JSON)

- **Writing** (:meth:`Spool.append`, on the request path): one ``os.write`` of the whole
  record to the active segment, opened ``O_APPEND``. Once ``append`` returns the record is in
  the kernel's page cache, so it survives the process being killed (SIGTERM without a handler,
  kill -9). ``fsync`` policy: the sender thread fsyncs the active segment (and the directory
  after a new file) at most every ``fsync_interval`` seconds when something was written, and a
  segment when it is sealed; a power loss loses at most that interval.
- **Locking**: a process holds ``fcntl.flock(LOCK_EX)`` on every segment it writes or
  delivers, for as long as it does. Segments of a process that died are unlocked: another
  (or the restarted) process claims them (:meth:`Spool.claim_orphans`, non-blocking lock), so
  two live processes never deliver the same segment.
- **Delivering**: the sender reads records in order (:meth:`Spool.read`), sends them, and
  settles them (:meth:`Spool.settle`) after the console's answer. A segment is deleted only
  when it is sealed, read to its end and every record read from it is settled (2xx, or
  refused for good). Records delivered before a crash are sent again by the next process and
  answered as ``duplicates`` (the console's ``request_id`` idempotency): stored once.
- **Bound**: ``max_bytes`` for the whole directory; a record that does not fit drops the
  oldest segments first (their unread records are counted as dropped). Records already in a
  request are not dropped, so the bound may be exceeded by the batch in flight.
- **Corruption**: a record whose magic, length or checksum is wrong is skipped (the reader
  looks for the next magic), counted and reported; the rest of the file is delivered.
- **Trust**: what is delivered goes out with the runtime's token, so only segments this
  process's user wrote are adopted (:func:`foreign_reason`): a regular file, not a symbolic
  link, owned by this user, with one name, writable by no one else. Anything else in the
  directory (planted by another local user of a shared directory) is refused, left where it
  is, counted and logged once. The directory is created ``0700``; one writable by others
  is used, with a WARNING.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import stat
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger("context_runtime.reporter")

MAGIC = b"\xccTR1"
_HEADER = struct.Struct("<4sIIH")
HEADER_BYTES = _HEADER.size
SUFFIX = ".spool"
_READ_CHUNK = 1024 * 1024
_MAX_RECORD = 64 * 1024 * 1024  # a length beyond this is garbage, not a trace
_sequence = itertools.count()


def foreign_reason(info: os.stat_result) -> str | None:
    """Why a segment file (its ``fstat``) is not this user's to deliver, or None when it is:
    anyone who could have written it can make the runtime send traces under its token."""
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not this process's {os.geteuid()}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
    if info.st_nlink != 1:
        return f"{info.st_nlink} names (a hard link another user may have made)"
    return None


def encode_record(request_id: str, data: bytes) -> bytes:
    rid = request_id.encode("utf-8", "replace")[:65535]
    return _HEADER.pack(MAGIC, len(data), zlib.crc32(data, zlib.crc32(rid)), len(rid)) + rid + data


@dataclass(eq=False)
class Segment:
    path: Path
    fd: int
    own: bool  # written by this process (else claimed from a process that is gone)
    size: int = 0  # bytes that hold whole records (for an own segment: written so far)
    records: int = 0  # records in it (own: written; claimed: found valid at claim)
    read_offset: int = 0
    read_records: int = 0
    inflight: int = 0  # read, not yet settled
    sealed: bool = False
    removed: bool = False
    corrupt: int = 0
    ranges: list = field(default_factory=list)  # claimed: corrupt byte ranges, for the log

    @property
    def unread(self) -> int:
        return max(0, self.records - self.read_records)


class Spool:
    """A directory of segments (module docstring). Thread-safe: ``append`` is called by any
    thread, everything else by the reporter's sender thread."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        max_bytes: int,
        segment_bytes: int,
        fsync_interval: float | None,
    ):
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.fsync_interval = fsync_interval
        self._lock = threading.Lock()
        self._segments: list[Segment] = []  # delivery order: oldest first
        self._active: Segment | None = None
        self._retired: list[Segment] = []  # removed, fd still to close (sender)
        self._to_sync: list[Segment] = []
        self._dir_dirty = False
        self._dirty = False
        self._last_sync = time.monotonic()
        self.bytes = 0
        self.dropped_records = 0  # by drop-oldest
        self.corrupt_records = 0
        self.corrupt_files = 0
        self.recovered_records = 0
        self.refused_files: dict[str, str] = {}  # name → why it is not ours to deliver
        self._next_full_warning = 0.0

    # ------------------------------------------------------------ writing (any thread)

    def open(self) -> None:
        """Create the directory (``0700``) and check it takes a write (``OSError`` if
        not)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = self.directory.stat()
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            logger.warning(
                "Trace spool %s is writable by other users (owner uid %d, mode %04o): "
                "segments they plant there are refused, but give the spool a directory of "
                "its own",
                self.directory,
                info.st_uid,
                stat.S_IMODE(info.st_mode),
            )
        probe = self.directory / f".probe-{os.getpid()}-{next(_sequence)}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                if os.write(fd, b"\0" * 4096) != 4096:
                    raise OSError("short write")
            finally:
                os.close(fd)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(probe)

    def append(self, request_id: str, data: bytes) -> int:
        """Write one record; returns how many spooled traces were dropped (oldest first) to
        make room. Raises ``OSError`` when the disk does not take it."""
        record = encode_record(request_id, data)
        with self._lock:
            dropped = 0
            if self.bytes + len(record) > self.max_bytes:
                dropped = self._make_room(len(record))
            active = self._active
            if active is None or active.size >= self.segment_bytes:
                active = self._new_segment()
            written = os.write(active.fd, record)
            if written != len(record):
                # A torn record at the tail: seal before it; a later reader skips it.
                self._seal(active)
                raise OSError(f"short write to {active.path} ({written} of {len(record)})")
            active.size += written
            active.records += 1
            self.bytes += written
            self._dirty = True
            return dropped

    def _new_segment(self) -> Segment:
        if self._active is not None:
            self._seal(self._active)
        name = f"{time.time_ns():020d}-{os.getpid()}-{next(_sequence):06d}{SUFFIX}"
        path = self.directory / name
        # One descriptor for writing (O_APPEND) and the sender's pread; it holds the lock. It
        # is locked under a name no other process claims, then renamed: never seen unlocked.
        hidden = self.directory / f".{name}.new"
        fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(hidden, path)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(hidden)
            raise
        segment = Segment(path=path, fd=fd, own=True)
        self._segments.append(segment)
        self._active = segment
        self._dir_dirty = True
        return segment

    def _seal(self, segment: Segment) -> None:
        segment.sealed = True
        if self._active is segment:
            self._active = None
        self._to_sync.append(segment)
        self._remove_if_done(segment)

    def _make_room(self, needed: int) -> int:
        dropped = 0
        for segment in list(self._segments):
            if self.bytes + needed <= self.max_bytes:
                break
            if segment is self._active or segment.inflight:
                continue
            dropped += segment.unread
            self.dropped_records += segment.unread
            segment.read_records = segment.records
            self._remove(segment)
        now = time.monotonic()
        if dropped and now >= self._next_full_warning:
            self._next_full_warning = now + 60.0  # loud, not a line per segment
            logger.warning(
                "Trace spool %s is full (%s bytes): oldest traces dropped (%d so far)",
                self.directory,
                f"{self.max_bytes:,}",
                self.dropped_records,
            )
        return dropped

    # ------------------------------------------------------------ the sender's side

    def unread(self) -> int:
        with self._lock:
            return sum(segment.unread for segment in self._segments)

    def claim_orphans(self) -> int:
        """Lock and adopt the segments no live process holds (earlier runs, processes that
        died); returns the traces found in them. Corrupt records are counted and logged."""
        try:
            names = sorted(
                entry.name
                for entry in os.scandir(self.directory)
                if entry.name.endswith(SUFFIX) and entry.name not in self.refused_files
            )
        except OSError as error:
            logger.warning("Trace spool %s cannot be listed: %s", self.directory, error)
            return 0
        with self._lock:
            held = {segment.path.name for segment in self._segments}
        found = 0
        for name in names:
            if name in held:
                continue
            path = self.directory / name
            try:
                # Not through a link, and without waiting on whatever else the name is.
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as error:
                if error.errno in (errno.ELOOP, errno.EACCES, errno.EPERM):
                    self._refuse(name, "a symbolic link" if error.errno == errno.ELOOP else
                                 f"cannot be opened ({error.strerror})")  # fmt: skip
                continue  # else gone meanwhile (delivered by another process)
            try:
                info = os.fstat(fd)
            except OSError:
                os.close(fd)
                continue
            if info.st_nlink == 0:  # delivered and deleted by another process meanwhile
                os.close(fd)
                continue
            reason = foreign_reason(info)
            if reason is not None:  # judged before the lock: its owner's locks are no matter
                os.close(fd)
                self._refuse(name, reason)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # a live process holds it
            try:
                info = os.fstat(fd)
                if info.st_nlink == 0:  # delivered and deleted between opening and locking
                    raise FileNotFoundError(path)
                size = info.st_size
            except OSError:
                os.close(fd)
                continue
            segment = Segment(path=path, fd=fd, own=False, sealed=True)
            segment.size = size
            for _ in self._records(segment, 0, size, count_corrupt=True):
                segment.records += 1
            if segment.corrupt:
                self.corrupt_files += 1
                self.corrupt_records += segment.corrupt
                logger.warning(
                    "Trace spool: %s has %d corrupt record(s) at bytes %s; skipped, the rest "
                    "is delivered",
                    path,
                    segment.corrupt,
                    ", ".join(f"{a}–{b}" for a, b in segment.ranges[:5]),
                )
            found += segment.records
            with self._lock:
                self.bytes += size
                self._segments.append(segment)
                self._segments.sort(key=lambda s: s.path.name)
                self._remove_if_done(segment)
        if found:
            self.recovered_records += found
            logger.info(
                "Trace spool %s: %d traces of earlier runs to deliver", self.directory, found
            )
        return found

    def _refuse(self, name: str, reason: str) -> None:
        """A file this process will not deliver: counted, logged once, left where it is."""
        self.refused_files[name] = reason
        logger.warning(
            "Trace spool %s: %s is not this user's segment (%s); refused, not delivered",
            self.directory,
            name,
            reason,
        )

    def read(
        self, max_records: int, max_bytes: int, *, at_least_one: bool = True
    ) -> list[tuple[str, bytes, Segment]]:
        """The next unread records, in order: at most ``max_records`` and ``max_bytes`` of
        trace data (each counted with a separating byte), but with ``at_least_one`` the first
        whatever its size. Called only by the sender."""
        self._close_retired()
        items: list[tuple[str, bytes, Segment]] = []
        size = 0
        with self._lock:
            segments = [s for s in self._segments if s.read_offset < s.size]
            limits = {id(s): s.size for s in segments}
        for segment in segments:
            limit = limits[id(segment)]
            for _offset, end, rid, data in self._records(segment, segment.read_offset, limit):
                if len(items) >= max_records or (
                    (items or not at_least_one) and size + len(data) + 1 > max_bytes
                ):
                    with self._lock:
                        self._remove_if_done(segment)
                    return items
                with self._lock:
                    if segment.removed:  # dropped meanwhile to make room: counted there
                        break
                    segment.read_offset = end
                    segment.read_records += 1
                    segment.inflight += 1
                items.append((rid, data, segment))
                size += len(data) + 1
            with self._lock:
                if segment.read_offset < limit:
                    segment.read_offset = limit  # the rest was corrupt: skipped
                self._remove_if_done(segment)
            if len(items) >= max_records:
                break
        return items

    def settle(self, segment: Segment, count: int = 1) -> None:
        """``count`` records read from ``segment`` are done with (delivered or refused)."""
        with self._lock:
            segment.inflight -= count
            self._remove_if_done(segment)

    def release(self, segment: Segment, count: int = 1) -> None:
        """``count`` records read but not delivered (shutdown): they stay on disk."""
        with self._lock:
            segment.inflight -= count

    def seal_if_delivered(self) -> None:
        """Seal (and so delete) the active segment once all of it is delivered, so that a
        restart does not send it again."""
        with self._lock:
            active = self._active
            if (
                active is not None
                and active.size
                and active.read_offset >= active.size
                and not active.inflight
            ):
                self._seal(active)

    def sync(self, force: bool = False) -> None:
        """fsync what was written since the last time (policy: module docstring)."""
        now = time.monotonic()
        if not force and (
            self.fsync_interval is None or now - self._last_sync < self.fsync_interval
        ):
            return
        with self._lock:
            segments = [s for s in self._to_sync if not s.removed]
            self._to_sync.clear()
            if self._dirty and self._active is not None:
                segments.append(self._active)
            self._dirty = False
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        self._last_sync = now
        for segment in segments:
            with contextlib.suppress(OSError):
                os.fsync(segment.fd)
        if dir_dirty:
            with contextlib.suppress(OSError):
                fd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def close(self) -> None:
        """fsync and let go of every segment (what is left stays for the next process)."""
        with contextlib.suppress(Exception):
            self.sync(force=True)
        with self._lock:
            segments, self._segments = self._segments, []
            self._active = None
            self.bytes = 0
        for segment in segments:
            if segment.own and segment.size == 0 and not segment.removed:
                with contextlib.suppress(OSError):
                    os.unlink(segment.path)
            with contextlib.suppress(OSError):
                os.close(segment.fd)
        self._close_retired()

    def forget(self) -> None:
        """In a forked child: close the parent's descriptors (the parent keeps its locks)."""
        with self._lock:
            segments = self._segments + self._retired
            self._segments, self._retired, self._active = [], [], None
        for segment in segments:
            with contextlib.suppress(OSError):
                os.close(segment.fd)

    def info(self) -> dict:
        with self._lock:
            return {
                "directory": str(self.directory),
                "bytes": self.bytes,
                "max_bytes": self.max_bytes,
                "segments": len(self._segments),
                "unread": sum(segment.unread for segment in self._segments),
                "dropped_oldest": self.dropped_records,
                "corrupt_records": self.corrupt_records,
                "corrupt_files": self.corrupt_files,
                "recovered": self.recovered_records,
                "refused_files": len(self.refused_files),
            }

    # ------------------------------------------------------------ internals

    def _remove_if_done(self, segment: Segment) -> None:
        if (
            segment.sealed
            and not segment.removed
            and segment.inflight <= 0
            and segment.read_offset >= segment.size
        ):
            self._remove(segment)

    def _remove(self, segment: Segment) -> None:
        """Delete the file (under ``_lock``); the descriptor is closed by the sender."""
        if segment.removed:
            return
        segment.removed = True
        if self._active is segment:
            self._active = None
        with contextlib.suppress(ValueError):
            self._segments.remove(segment)
        self.bytes -= segment.size
        with contextlib.suppress(OSError):
            os.unlink(segment.path)
        self._retired.append(segment)

    def _close_retired(self) -> None:
        with self._lock:
            retired = [s for s in self._retired if s.inflight <= 0]
            self._retired = [s for s in self._retired if s.inflight > 0]
        for segment in retired:
            with contextlib.suppress(OSError):
                os.close(segment.fd)

    def _records(self, segment: Segment, start: int, limit: int, *, count_corrupt: bool = False):
        """``(offset, end, request_id, data)`` of the valid records in ``[start, limit)``;
        bytes that are no valid record are skipped up to the next magic."""
        offset = start
        buffer = b""
        buffer_at = start
        while offset < limit:
            need = min(limit - offset, _READ_CHUNK)
            if offset + HEADER_BYTES > buffer_at + len(buffer):
                buffer = _pread(segment.fd, need, offset)
                buffer_at = offset
                if not buffer:
                    return
            local = offset - buffer_at
            header = buffer[local : local + HEADER_BYTES]
            valid = len(header) == HEADER_BYTES
            if valid:
                magic, length, crc, rid_length = _HEADER.unpack(header)
                total = HEADER_BYTES + rid_length + length
                valid = magic == MAGIC and length <= _MAX_RECORD and offset + total <= limit
            if valid:
                if local + total > len(buffer):
                    buffer = _pread(segment.fd, max(total, need), offset)
                    buffer_at, local = offset, 0
                body = buffer[local + HEADER_BYTES : local + total]
                rid, data = body[:rid_length], body[rid_length:]
                valid = (
                    len(body) == rid_length + length and zlib.crc32(data, zlib.crc32(rid)) == crc
                )
            if valid:
                yield offset, offset + total, rid.decode("utf-8", "replace"), data
                offset += total
                continue
            # Not a record here: skip to the next magic (or the end).
            found = -1
            position = offset + 1
            while position < limit:
                chunk = _pread(segment.fd, min(_READ_CHUNK, limit - position), position)
                if not chunk:
                    break
                index = chunk.find(MAGIC)
                if index >= 0:
                    found = position + index
                    break
                position += max(1, len(chunk) - len(MAGIC) + 1)
            end = found if found >= 0 else limit
            if count_corrupt:
                segment.corrupt += 1
                segment.ranges.append((offset, end))
            offset = end
            buffer, buffer_at = b"", offset


def _pread(fd: int, size: int, offset: int) -> bytes:
    return os.pread(fd, size, offset)
