"""One captured packet as every netio capture reader yields it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Record:
    """A captured frame, not yet decoded (decoding belongs to ``netio.wire``).

    ``ts_ns`` is the capture time in integer nanoseconds since the Unix epoch
    (0 for pcapng Simple Packet Blocks, which carry no timestamp). ``linktype``
    is the link-layer header type (``netio.wire.link.LinkType`` values) that
    ``frame`` starts with. ``frame`` holds the captured bytes, which may be fewer
    than ``orig_len``, the length on the wire. ``interface_id`` is the pcapng
    interface (0 for classic pcap). ``record_index`` counts packets from 0 across
    the whole file; ``byte_offset`` is the file offset of the packet's record
    header (pcap) or block (pcapng).
    """

    ts_ns: int
    linktype: int
    frame: bytes
    orig_len: int
    interface_id: int
    record_index: int
    byte_offset: int

    @property
    def caplen(self) -> int:
        """Captured length in bytes (``len(frame)``)."""
        return len(self.frame)

    @property
    def truncated(self) -> bool:
        """True when the capture kept fewer bytes than were on the wire."""
        return len(self.frame) < self.orig_len
