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
