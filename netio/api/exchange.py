"""netio's own out-of-band connection exchange (sans-I/O framing + an asyncio driver).

Each message is ``b"NTIO"``, a 1-byte protocol version, a 1-byte kind, a 4-byte
big-endian body length and a UTF-8 JSON object body of at most
:data:`MAX_BODY_BYTES`. The client sends HELLO (its QP address and settings), the
server answers ACCEPT (its QP address and the agreed path MTU) or REJECT (a reason);
the client then sends READY once its QP is up, so that neither side sends data to a
QP that is not yet ready. Every read is bounded by the caller's timeout, and every
malformed, oversized or wrong-version message raises :class:`ExchangeMismatch` or
:class:`ConnectFailed` naming the step, never anything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import struct
from dataclasses import dataclass
from typing import Any

from netio.backends.base import QpAddress
from netio.errors import ConnectFailed, ExchangeMismatch, PeerDisconnected, Timeout

MAGIC = b"NTIO"
VERSION = 1
MAX_BODY_BYTES = 16 * 1024
_HEADER = struct.Struct("!4sBBI")


class Kind(enum.IntEnum):
    HELLO = 1
    ACCEPT = 2
    REJECT = 3
    READY = 4


@dataclass(frozen=True, slots=True)
class Message:
    kind: Kind
    body: dict[str, Any]


def encode(kind: Kind, body: dict[str, Any]) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    if len(data) > MAX_BODY_BYTES:
        raise ExchangeMismatch(f"exchange message of {len(data)} bytes exceeds "
                               f"{MAX_BODY_BYTES}")
    return _HEADER.pack(MAGIC, VERSION, int(kind), len(data)) + data


def parse_header(header: bytes, step: str) -> tuple[Kind, int]:
    """The kind and body length of a message header; raises on a bad one."""
    magic, version, kind, length = _HEADER.unpack(header)
    if magic != MAGIC:
        raise ConnectFailed(f"{step}: the peer is not a netio endpoint (got {magic!r} "
                            f"instead of {MAGIC!r})")
    if version != VERSION:
        raise ExchangeMismatch(f"{step}: exchange protocol version {version}, this netio "
                               f"speaks {VERSION}", hint="use the same netio version on "
                               "both sides")
    try:
        k = Kind(kind)
    except ValueError:
        raise ConnectFailed(f"{step}: unknown exchange message kind {kind}") from None
    if length > MAX_BODY_BYTES:
        raise ConnectFailed(f"{step}: exchange message of {length} bytes exceeds "
                            f"{MAX_BODY_BYTES}")
    return k, length


def parse_body(data: bytes, step: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConnectFailed(f"{step}: malformed exchange message: {exc}") from None
    if not isinstance(body, dict):
        raise ConnectFailed(f"{step}: exchange message is not a JSON object")
    return body


async def read_message(reader: asyncio.StreamReader, step: str, timeout_s: float) -> Message:
    """One message, within ``timeout_s``."""
    async def read() -> Message:
        try:
            header = await reader.readexactly(_HEADER.size)
            kind, length = parse_header(header, step)
            body = parse_body(await reader.readexactly(length), step)
        except asyncio.IncompleteReadError:
            raise PeerDisconnected(f"{step}: the peer closed the connection") from None
        except (ConnectionError, OSError) as exc:
            raise PeerDisconnected(f"{step}: {exc.strerror or exc}") from None
        return Message(kind, body)

    try:
        return await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise Timeout(step, timeout_s, hint="the peer accepted the TCP connection but sent "
                      "nothing: is it a netio endpoint of the same version?") from None


async def write_message(writer: asyncio.StreamWriter, kind: Kind, body: dict[str, Any],
                        step: str, timeout_s: float) -> None:
    writer.write(encode(kind, body))
    try:
        await asyncio.wait_for(writer.drain(), timeout_s)
    except TimeoutError:
        raise Timeout(step, timeout_s) from None
    except (ConnectionError, OSError) as exc:
        raise PeerDisconnected(f"{step}: {exc.strerror or exc}") from None


_ADDRESS_FIELDS = {f.name: f.type for f in dataclasses.fields(QpAddress)}


def address_to_json(address: QpAddress) -> dict[str, Any]:
    return dataclasses.asdict(address)


def address_from_json(value: object, step: str) -> QpAddress:
    """A peer's QP address, every field checked for presence and type."""
    if not isinstance(value, dict):
        raise ConnectFailed(f"{step}: 'address' is not an object")
    unknown = sorted(set(value) - set(_ADDRESS_FIELDS))
    if unknown:
        raise ConnectFailed(f"{step}: unknown address field(s) {', '.join(unknown)}")
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(QpAddress):
        if f.name not in value:
            if f.default is dataclasses.MISSING:
                raise ConnectFailed(f"{step}: address field '{f.name}' is missing")
            continue
        v = value[f.name]
        want = int if f.type in ("int", int) else str
        if not isinstance(v, want) or isinstance(v, bool):
            raise ConnectFailed(f"{step}: address field '{f.name}' must be {want.__name__}")
        kwargs[f.name] = v
    address = QpAddress(**kwargs)
    if not 0 <= address.qpn <= 0xFFFFFF or not 0 <= address.psn <= 0xFFFFFF:
        raise ConnectFailed(f"{step}: QPN or PSN does not fit 24 bits")
    if address.mtu_bytes not in (256, 512, 1024, 2048, 4096):
        raise ConnectFailed(f"{step}: path MTU {address.mtu_bytes} is not an IB MTU "
                            "(256, 512, 1024, 2048, 4096)")
    return address


__all__ = [
    "MAX_BODY_BYTES",
    "VERSION",
    "Kind",
    "Message",
    "address_from_json",
    "address_to_json",
    "encode",
    "parse_body",
    "parse_header",
    "read_message",
    "write_message",
]
