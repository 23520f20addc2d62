"""netio.roce: a sans-I/O RoCEv2 (soft RoCE) engine.

Public API: ``RoceEngine`` (engine.py), QPs (qp.py), memory (memory.py), work requests and
completions (verbs.py), and for tests and benchmarks the in-memory ``FaultyLink`` (link.py)
and ``EnginePair`` (sim.py). Invalid local verbs calls raise
:class:`netio.errors.RoceError`, invalid registrations :class:`netio.errors.RegistrationError`.
"""

from netio.api.types import Access
from netio.roce.engine import (
    CompletionQueue,
    EngineStats,
    OutgoingDatagram,
    RoceEngine,
    SharedReceiveQueue,
)
from netio.roce.link import FaultyLink, LinkFaults
from netio.roce.memory import MemoryRegion, ProtectionDomain, Sge
from netio.roce.qp import (
    LEGAL_TRANSITIONS,
    QpAttributes,
    QpState,
    QpType,
    QueuePair,
    default_udp_source_port,
    udp_source_port,
)
from netio.roce.sim import EnginePair
from netio.roce.verbs import (
    Completion,
    RecvWr,
    SendWr,
    UdAddress,
    WcFlags,
    WcOpcode,
    WcStatus,
    WrOpcode,
)

__all__ = [
    "LEGAL_TRANSITIONS",
    "Access",
    "Completion",
    "CompletionQueue",
    "EnginePair",
    "EngineStats",
    "FaultyLink",
    "LinkFaults",
    "MemoryRegion",
    "OutgoingDatagram",
    "ProtectionDomain",
    "QpAttributes",
    "QpState",
    "QpType",
    "QueuePair",
    "RecvWr",
    "RoceEngine",
    "SendWr",
    "Sge",
    "SharedReceiveQueue",
    "UdAddress",
    "WcFlags",
    "WcOpcode",
    "WcStatus",
    "WrOpcode",
    "default_udp_source_port",
    "udp_source_port",
]
