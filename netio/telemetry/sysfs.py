"""Reading sysfs attribute files: fast, and with faults classified.

sysfs attributes are small; ``os.open``/``os.read`` skip the buffered-file
machinery, which matters at thousands of reads per second.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass


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
    sysfs, or on a fixture tree that is not replaced file by file.  Any error
    drops the descriptor, and the next poll opens the file afresh (a device
    removed and re-created gets new files).
    """

    def __init__(self, keep_open: bool) -> None:
        self.keep_open = keep_open
        self._fds: dict[str, int] = {}

    def read(self, path: str) -> str | ReadFault:
        if not self.keep_open:
            return read_attr(path)
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return ReadFault("vanished", "no such file")
            except OSError as e:
                return ReadFault("unreadable", e.strerror or "error")
            self._fds[path] = fd
        try:
            data = os.pread(fd, 4096, 0)
        except OSError as e:
            self.drop(path)
            if e.errno in (errno.ENODEV, errno.ENOENT):
                return ReadFault("vanished", e.strerror or "gone")
            return ReadFault("unreadable", e.strerror or "error")
        return data.decode("ascii", "replace").strip()

    def drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def drop_under(self, prefix: str) -> None:
        for p in [p for p in self._fds if p.startswith(prefix)]:
            self.drop(p)

    def close(self) -> None:
        for p in list(self._fds):
            self.drop(p)
