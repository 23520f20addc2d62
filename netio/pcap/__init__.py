"""netio.pcap: the one capture reader (pcap and pcapng) and a pcap writer.

``open_capture`` streams ``Record`` objects with bounded memory;
``scan_capture``/``CaptureScanner`` are the fast path (mmap + native scanner
into numpy columns); ``WindowScanner`` is the same scanner over a reused
read() window (bounded memory, frames valid for one batch); ``PcapWriter``
writes classic pcap.
"""

from netio.pcap.format import MAX_BLOCK_BYTES, MAX_CAPLEN_BYTES, CaptureFormat
from netio.pcap.pcap import PcapHeader
from netio.pcap.reader import CaptureReader, open_capture
from netio.pcap.record import Record
from netio.pcap.scan import (
    CaptureScanner,
    ScanColumns,
    ScanResult,
    WindowScanner,
    scan_capture,
)
from netio.pcap.writer import PcapWriter

__all__ = [
    "MAX_BLOCK_BYTES",
    "MAX_CAPLEN_BYTES",
    "CaptureFormat",
    "CaptureReader",
    "CaptureScanner",
    "PcapHeader",
    "PcapWriter",
    "Record",
    "ScanColumns",
    "ScanResult",
    "WindowScanner",
    "open_capture",
    "scan_capture",
]
