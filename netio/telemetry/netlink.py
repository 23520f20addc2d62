"""A small netlink client: requests, dumps and attribute parsing (``linux/netlink.h``).

Collectors that poll every second decode only the attributes they use with
``struct``, which costs a fraction of a general-purpose netlink library.  The
socket is blocking with a timeout; one request is in flight at a time.
"""

from __future__ import annotations

import errno as errno_mod
import os
import socket
import struct
from collections.abc import Iterator

NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300  # NLM_F_ROOT | NLM_F_MATCH
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
NLATTR = struct.Struct("=HH")  # len, type
_ERRNO = struct.Struct("=i")
RECV_BYTES = 1 << 17


def align4(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    raw = NLATTR.pack(NLATTR.size + len(payload), kind) + payload
    return raw + b"\0" * (align4(len(raw)) - len(raw))


def message(msg_type: int, flags: int, seq: int, payload: bytes) -> bytes:
    return NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, seq, 0) + payload


def iter_attrs(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(type without flags, payload start, payload end) of each attribute in
    ``buf[start:end]``; stops at the first one that does not fit."""
    pos = start
    while pos + NLATTR.size <= end:
        length, kind = NLATTR.unpack_from(buf, pos)
        if length < NLATTR.size or pos + length > end:
            return
        yield kind & NLA_TYPE_MASK, pos + NLATTR.size, pos + length
        pos += align4(length)


def attrs(buf: bytes, start: int, end: int) -> dict[int, tuple[int, int]]:
    """type -> (payload start, payload end); a repeated type keeps its last."""
    return {k: (a, b) for k, a, b in iter_attrs(buf, start, end)}


def u8(buf: bytes, span: tuple[int, int] | None) -> int | None:
    return None if span is None or span[1] - span[0] < 1 else buf[span[0]]


def u32(buf: bytes, span: tuple[int, int] | None) -> int | None:
    if span is None or span[1] - span[0] < 4:
        return None
    return int.from_bytes(buf[span[0]:span[0] + 4], "little")


def u64(buf: bytes, span: tuple[int, int] | None) -> int | None:
    if span is None or span[1] - span[0] < 8:
        return None
    return int.from_bytes(buf[span[0]:span[0] + 8], "little")


def string(buf: bytes, span: tuple[int, int] | None) -> str | None:
    if span is None:
        return None
    return buf[span[0]:span[1]].split(b"\0", 1)[0].decode("utf-8", "replace")


class NetlinkSocket:
    """One netlink socket of ``protocol`` (``NETLINK_ROUTE`` = 0, ``NETLINK_RDMA`` = 20)."""

    def __init__(self, protocol: int, timeout_s: float = 1.0) -> None:
        self.protocol = protocol
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._seq = 0

    def _socket(self) -> socket.socket:
        if self._sock is None:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, self.protocol)
            s.settimeout(self.timeout_s)
            s.bind((0, 0))
            self._sock = s
        return self._sock

    def request(self, msg_type: int, payload: bytes, *, dump: bool = True
                ) -> list[tuple[int, bytes]]:
        """Send one request; return the answer's messages as (type, bytes after the
        header), up to NLMSG_DONE (a dump) or the single reply.  An NLMSG_ERROR with
        an error code raises OSError with that errno."""
        sock = self._socket()
        self._seq = self._seq % 0x7FFFFFFF + 1
        seq = self._seq
        flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
        try:
            sock.send(message(msg_type, flags, seq, payload))
            out: list[tuple[int, bytes]] = []
            while True:
                data = sock.recv(RECV_BYTES)
                pos = 0
                while pos + NLMSGHDR.size <= len(data):
                    length, kind, mflags, mseq, _pid = NLMSGHDR.unpack_from(data, pos)
                    if length < NLMSGHDR.size or pos + length > len(data):
                        raise OSError(errno_mod.EPROTO, "truncated netlink message")
                    body = data[pos + NLMSGHDR.size:pos + length]
                    pos += align4(length)
                    if mseq != seq:
                        continue  # a late answer to an earlier, timed-out request
                    if kind == NLMSG_DONE:
                        return out
                    if kind == NLMSG_ERROR:
                        code = _ERRNO.unpack_from(body)[0] if len(body) >= 4 else 0
                        if code:
                            raise OSError(-code, os.strerror(-code))
                        return out
                    out.append((kind, body))
                    if not dump and not mflags & NLM_F_MULTI:
                        return out
        except OSError:
            self.close()  # a half-read answer must not be read as the next one's
            raise

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
