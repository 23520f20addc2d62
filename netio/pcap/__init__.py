"""netio.pcap: the one capture reader (pcap and pcapng) and a pcap writer.

``open_capture`` streams ``Record`` objects with bounded memory;
``scan_capture`` is the fast path (mmap + native scanner into numpy
columns); ``PcapWriter`` writes classic pcap.
"""

from netio.pcap.format import MAX_BLOCK_BYTES, MAX_CAPLEN_BYTES, CaptureFormat
from netio.pcap.pcap import PcapHeader
from netio.pcap.reader import CaptureReader, open_capture
from netio.pcap.record import Record
from netio.pcap.scan import CaptureScanner, ScanColumns, ScanResult, scan_capture
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
    "open_capture",
    "scan_capture",
]
