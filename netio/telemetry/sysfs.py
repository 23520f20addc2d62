"""Reading sysfs attribute files: fast, and with faults classified.

sysfs attributes are small; ``os.open``/``os.read`` skip the buffered-file
machinery, which matters at thousands of reads per second.  Counter files kept
open are read many per call by :class:`CounterReader` (in C when netio's native
module is built).
"""

from __future__ import annotations

import errno
import os
import resource
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from netio import native

# Out of descriptors: read such a file by open/read/close instead of keeping it.
_NO_MORE_FDS = (errno.EMFILE, errno.ENFILE)


def keep_budget() -> int:
    """How many descriptors all AttrReaders together may keep: the soft
    RLIMIT_NOFILE less a reserve for sockets, captures and transient reads."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, soft - max(256, soft // 4))


_kept_lock = threading.Lock()
_kept_total = 0  # descriptors kept by all readers of this process


def _release(fds: dict[str, int]) -> None:
    """Close what a reader kept (its close(), or its finalizer when it is dropped)."""
    global _kept_total
    with _kept_lock:  # taken out at once: a second caller finds nothing left to close
        kept = list(fds.values())
        fds.clear()
        _kept_total -= len(kept)
    for fd in kept:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class ReadFault:
    kind: str  # "vanished" | "unreadable"
    reason: str


def read_attr(path: str) -> str | ReadFault:
    """Return the stripped text of one sysfs attribute, or why it could not be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return ReadFault("vanished", "no such file")
    except OSError as e:
        return ReadFault("unreadable", e.strerror or errno.errorcode.get(e.errno or 0, "error"))
    try:
        data = os.read(fd, 4096)
    except OSError as e:
        # sysfs reports driver failures at read time (EIO, EOPNOTSUPP, EINVAL).
        return ReadFault("unreadable", e.strerror or errno.errorcode.get(e.errno or 0, "error"))
    finally:
        os.close(fd)
    return data.decode("ascii", "replace").strip()


def list_dir(path: str) -> list[str] | ReadFault:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return ReadFault("vanished", "no such directory")
    except OSError as e:
        return ReadFault("unreadable", e.strerror or "error")


SYSFS_MAGIC = 0x62656572


def is_sysfs(path: str) -> bool:
    """True when ``path`` is on a real sysfs mount (not a copied fixture tree)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return False
    real = os.path.realpath(path)
    best, fstype = "", ""
    for fields in mounts:
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        mnt = fields[4]
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, fstype = mnt, fields[sep + 1]
    return fstype == "sysfs"


class AttrReader:
    """Reads attributes through file descriptors kept open between polls.

    A sysfs attribute regenerates its value on every read from offset 0, so
    ``pread(fd, n, 0)`` on a kept descriptor is one syscall instead of three
    (open, read, close).  Only valid where files are rewritten in place: on
    sysfs, or on a fixture tree that is not replaced file by file.  A read that
    says the file is gone (ENODEV, ENOENT) drops the descriptor, and the next poll
    opens the file afresh (a device removed and re-created gets new files).  When
    the process runs out of descriptors, files are read without keeping them.

    ``generation`` changes whenever a descriptor is dropped, so that a caller
    holding the list :meth:`descriptors` returned knows to ask again.

    The readers of a process keep at most :func:`keep_budget` descriptors in
    all; files past that are read by open/read/close (a host with thousands of
    counters under a low descriptor limit is slower, not broken).
    """

    def __init__(self, keep_open: bool) -> None:
        self.keep_open = keep_open
        self._fds: dict[str, int] = {}
        self.generation = 0
        self._budget = keep_budget()
        # A reader dropped without close() (a collector replaced, a test) still
        # gives its descriptors back.
        weakref.finalize(self, _release, self._fds).atexit = False  # exit closes them anyway

    def _open(self, path: str) -> int | ReadFault | None:
        """A kept descriptor; None when no more may be kept (read without keeping)."""
        global _kept_total
        fd = self._fds.get(path)
        if fd is not None:
            return fd
        with _kept_lock:
            if _kept_total >= self._budget:
                return None
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return ReadFault("vanished", "no such file")
            except OSError as e:
                if e.errno in _NO_MORE_FDS:
                    return None
                return ReadFault("unreadable", e.strerror or "error")
            _kept_total += 1
        self._fds[path] = fd
        return fd

    def read(self, path: str) -> str | ReadFault:
        if not self.keep_open:
            return read_attr(path)
        fd = self._open(path)
        if fd is None:
            return read_attr(path)
        if isinstance(fd, ReadFault):
            return fd
        try:
            data = os.pread(fd, 4096, 0)
        except OSError as e:
            if e.errno in (errno.ENODEV, errno.ENOENT, errno.EBADF):
                self.drop(path)
                return ReadFault("vanished", e.strerror or "gone")
            # The driver refused this read (EINVAL for the speed of a link that is
            # down, EIO, EOPNOTSUPP): the file is still there, keep it.
            return ReadFault("unreadable", e.strerror or "error")
        return data.decode("ascii", "replace").strip()

    def descriptors(self, paths: Sequence[str]) -> list[int] | None:
        """Kept descriptors for ``paths``, opened as needed; None when not keeping
        files open or when one cannot be opened (read file by file then, which says
        why).  Valid while ``generation`` stays the same."""
        if not self.keep_open:
            return None
        out: list[int] = []
        for path in paths:
            fd = self._open(path)
            if not isinstance(fd, int):
                return None
            out.append(fd)
        return out

    def drop(self, path: str) -> None:
        global _kept_total
        fd = self._fds.pop(path, None)
        if fd is not None:
            self.generation += 1
            os.close(fd)
            with _kept_lock:
                _kept_total -= 1

    def drop_under(self, prefix: str) -> None:
        for p in [p for p in self._fds if p.startswith(prefix)]:
            self.drop(p)

    def close(self) -> None:
        if self._fds:
            self.generation += 1
        _release(self._fds)


# Bytes read per counter file (as native/sysfs_counters.c): a 64-bit counter is
# at most 20 digits and a newline; a read that fills the buffer is not a number.
COUNTER_BYTES = 32


def read_counters_py(fds: Sequence[int]) -> tuple[list[int], list[int] | None]:
    """The pure-Python :meth:`CounterReader.read` (and its reference).

    Status per file: 0 when the value is the number the file holds, the errno
    when the read failed, -1 when the caller must read the text itself.  Where
    Python's ``int()`` is more lenient than C (a sign, ``_``), this may say 0 where
    C says -1; a caller re-reading those files gets the same number either way.
    """
    pread, size = os.pread, COUNTER_BYTES
    try:
        raw = [pread(fd, size, 0) for fd in fds]
        if raw and max(map(len, raw)) >= size:
            raise ValueError("longer than a counter")
        return list(map(int, raw)), None
    except (OSError, ValueError):
        pass  # one of them: classify each below
    values: list[int] = []
    status: list[int] = []
    for fd in fds:
        try:
            data = pread(fd, size, 0)
        except OSError as e:
            values.append(0)
            status.append(e.errno or errno.EIO)
            continue
        try:
            if len(data) >= size:
                raise ValueError("longer than a counter")
            values.append(int(data))
            status.append(0)
        except ValueError:
            values.append(0)
            status.append(-1)
    return values, status


class CounterReader:
    """Reads a fixed list of kept counter descriptors in one call per poll.

    The descriptors stay owned by the :class:`AttrReader` that opened them; a
    CounterReader is valid while that reader's ``generation`` is unchanged.
    """

    def __init__(self, fds: Sequence[int], *, use_native: bool | None = None) -> None:
        self.fds = list(fds)
        self.native = native.AVAILABLE if use_native is None else use_native
        if self.native and not native.AVAILABLE:
            raise RuntimeError("netio's native module is not built")
        self._c: tuple[Any, Any, Any] | None = None
        if self.native:
            n = len(self.fds)
            self._c = (native.ffi.new("int[]", self.fds), native.ffi.new("uint64_t[]", n),
                       native.ffi.new("int32_t[]", n))

    def read(self) -> tuple[list[int], list[int] | None]:
        """(values, None) when every file held a number; else (values, status) as
        :func:`read_counters_py` says."""
        if self._c is None:
            return read_counters_py(self.fds)
        c_fds, c_values, c_status = self._c
        n = len(self.fds)
        bad = native.lib.netio_sysfs_read_counters(c_fds, n, c_values, c_status)
        values: list[int] = native.ffi.unpack(c_values, n)
        return values, (native.ffi.unpack(c_status, n) if bad else None)
