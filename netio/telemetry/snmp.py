"""Switch counters over SNMP v2c (pysnmp v7 asyncio API).

Walks IF-MIB (RFC 2863) ``ifXTable`` 64-bit counters and ``ifTable`` status,
discards and errors, and IEEE8021-PFC-MIB ``ieee8021PfcIfTable``
(``ieee8021PfcRequests`` = PFC frames sent, ``ieee8021PfcIndications`` = PFC
frames received; Counter32, augmenting ifEntry, so indexed by ifIndex).  The
standard MIB has no priority; vendors put per-priority counters in their own
tables, so ``pfc_priority_*_oid`` may name a column indexed by
``ifIndex.priority``.

All columns are walked together with GETBULK.  A target that fails is polled
again after an exponential back-off (interval x 2^failures, capped at
``backoff_max_s``); meanwhile its collection returns at once with
``netio_switch_up 0``, so a dead switch costs nothing and blocks nobody.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from netio.errors import SnmpError
from netio.telemetry import metrics as m
from netio.telemetry.sample import Collection, Fault, MetricSpec, Sample
from netio.telemetry.selection import Selection


@dataclass(frozen=True, slots=True)
class SnmpTarget:
    """One ``[[snmp]]`` entry: a switch polled over SNMP v2c."""

    name: str
    host: str
    port: int = 161
    community: str = "public"
    interval_s: float = 10.0
    timeout_s: float = 1.0
    retries: int = 1
    backoff_max_s: float = 300.0
    interfaces: Selection = field(default_factory=Selection)
    pfc_priority_requests_oid: str | None = None
    pfc_priority_indications_oid: str | None = None


IF_NAME = "1.3.6.1.2.1.31.1.1.1.1"
IF_OPER_STATUS = "1.3.6.1.2.1.2.2.1.8"
IF_HIGH_SPEED = "1.3.6.1.2.1.31.1.1.1.15"


@dataclass(frozen=True, slots=True)
class Column:
    oid: str
    spec: MetricSpec | None
    extra: tuple[str, ...] = ()
    width_bits: int = 64
    per_priority: bool = False


COLUMNS: tuple[Column, ...] = (
    Column(IF_NAME, None),
    Column(IF_OPER_STATUS, None),
    Column(IF_HIGH_SPEED, None),
    Column("1.3.6.1.2.1.31.1.1.1.6", m.SW_BYTES, ("rx",)),       # ifHCInOctets
    Column("1.3.6.1.2.1.31.1.1.1.10", m.SW_BYTES, ("tx",)),      # ifHCOutOctets
    Column("1.3.6.1.2.1.31.1.1.1.7", m.SW_PACKETS, ("rx",)),     # ifHCInUcastPkts
    Column("1.3.6.1.2.1.31.1.1.1.8", m.SW_PACKETS, ("rx",)),     # ifHCInMulticastPkts
    Column("1.3.6.1.2.1.31.1.1.1.9", m.SW_PACKETS, ("rx",)),     # ifHCInBroadcastPkts
    Column("1.3.6.1.2.1.31.1.1.1.11", m.SW_PACKETS, ("tx",)),    # ifHCOutUcastPkts
    Column("1.3.6.1.2.1.31.1.1.1.12", m.SW_PACKETS, ("tx",)),    # ifHCOutMulticastPkts
    Column("1.3.6.1.2.1.31.1.1.1.13", m.SW_PACKETS, ("tx",)),    # ifHCOutBroadcastPkts
    Column("1.3.6.1.2.1.2.2.1.13", m.SW_DISCARDS, ("rx",), 32),  # ifInDiscards
    Column("1.3.6.1.2.1.2.2.1.19", m.SW_DISCARDS, ("tx",), 32),  # ifOutDiscards
    Column("1.3.6.1.2.1.2.2.1.14", m.SW_ERRORS, ("rx",), 32),    # ifInErrors
    Column("1.3.6.1.2.1.2.2.1.20", m.SW_ERRORS, ("tx",), 32),    # ifOutErrors
    Column("1.3.111.2.802.1.1.21.1.1.1.2", m.SW_PFC_REQUESTS, (), 32),
    Column("1.3.111.2.802.1.1.21.1.1.1.3", m.SW_PFC_INDICATIONS, (), 32),
)
MAX_REPETITIONS = 25
MAX_ROUNDS = 2000  # walk bound: a broken agent that never ends a column


class SnmpCollector:
    def __init__(self, target: SnmpTarget) -> None:
        self.target = target
        self.name = f"snmp:{target.name}"
        self.columns = list(COLUMNS)
        if target.pfc_priority_requests_oid:
            self.columns.append(Column(target.pfc_priority_requests_oid, m.SW_PFC_PRIO_REQUESTS,
                                       (), 64, True))
        if target.pfc_priority_indications_oid:
            self.columns.append(Column(target.pfc_priority_indications_oid,
                                       m.SW_PFC_PRIO_INDICATIONS, (), 64, True))
        self.failures = 0
        self.next_poll_mono = 0.0
        self._engine: Any = None
        self._transport: Any = None
        self._last_error = ""

    def backoff_s(self) -> float:
        if self.failures == 0:
            return 0.0
        return float(min(self.target.interval_s * 2 ** self.failures, self.target.backoff_max_s))

    async def _walk(self) -> dict[str, dict[str, Any]]:
        """Column OID -> {index suffix: value}, all columns in one GETBULK walk."""
        from pysnmp.hlapi.v3arch.asyncio import (
            CommunityData,
            ContextData,
            ObjectIdentity,
            ObjectType,
            SnmpEngine,
            UdpTransportTarget,
            bulk_cmd,
        )
        from pysnmp.proto.rfc1905 import EndOfMibView, NoSuchInstance, NoSuchObject

        if self._engine is None:
            self._engine = SnmpEngine()
        if self._transport is None:
            self._transport = await UdpTransportTarget.create(
                (self.target.host, self.target.port), timeout=self.target.timeout_s,
                retries=self.target.retries)
        auth = CommunityData(self.target.community, mpModel=1)
        result: dict[str, dict[str, Any]] = {c.oid: {} for c in self.columns}
        cursor = {c.oid: c.oid for c in self.columns}
        for _ in range(MAX_ROUNDS):
            if not cursor:
                break
            cols = list(cursor)
            err_ind, err_status, err_index, binds = await bulk_cmd(
                self._engine, auth, self._transport, ContextData(), 0, MAX_REPETITIONS,
                *[ObjectType(ObjectIdentity(cursor[c])) for c in cols], lookupMib=False)
            if err_ind:
                raise SnmpError(str(err_ind))
            if err_status:
                raise SnmpError(f"{err_status.prettyPrint()} at {err_index}")
            progressed: dict[str, str] = {}
            finished: set[str] = set()
            for i, (oid_obj, val) in enumerate(binds):
                col = cols[i % len(cols)]
                if col in finished:
                    continue
                oid = str(oid_obj)
                if isinstance(val, EndOfMibView | NoSuchObject | NoSuchInstance) or \
                        not oid.startswith(col + "."):
                    finished.add(col)
                    continue
                result[col][oid[len(col) + 1:]] = val
                progressed[col] = oid
            cursor = {c: progressed[c] for c in cols if c not in finished and c in progressed}
        return result

    async def collect_async(self) -> Collection:
        t0 = time.perf_counter()
        tname = self.target.name
        now = time.monotonic()
        if now < self.next_poll_mono:
            return Collection(self.name, (
                Sample(m.SW_UP_TARGET, (tname,), 0.0),
                Sample(m.SW_BACKOFF, (tname,), self.backoff_s()),
            ), (Fault(self.name, "down", tname, f"backing off: {self._last_error}"),),
                time.time_ns(), time.perf_counter() - t0)
        try:
            table = await self._walk()
        except Exception as e:  # every failure of the agent or transport is a "down"
            self.failures += 1
            self._last_error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            self.next_poll_mono = time.monotonic() + self.backoff_s()
            self._transport = None
            return Collection(self.name, (
                Sample(m.SW_UP_TARGET, (tname,), 0.0),
                Sample(m.SW_BACKOFF, (tname,), self.backoff_s()),
            ), (Fault(self.name, "down", tname, self._last_error),), time.time_ns(),
                time.perf_counter() - t0)
        self.failures = 0
        self.next_poll_mono = 0.0
        samples = [Sample(m.SW_UP_TARGET, (tname,), 1.0), Sample(m.SW_BACKOFF, (tname,), 0.0)]
        names = {idx: str(v) for idx, v in table[IF_NAME].items()}
        seen: list[str] = []
        sums: dict[tuple[str, tuple[str, ...]], Sample] = {}
        for idx, name in sorted(names.items(), key=lambda kv: int(kv[0])):
            if not self.target.interfaces(name):
                continue
            seen.append(name)
            st = table[IF_OPER_STATUS].get(idx)
            if st is not None:
                samples.append(Sample(m.SW_UP, (tname, name), 1.0 if int(st) == 1 else 0.0))
            sp = table[IF_HIGH_SPEED].get(idx)
            if sp is not None and int(sp) > 0:
                samples.append(Sample(m.SW_SPEED, (tname, name), int(sp) * 1e6 / 8.0))
        by_index = {idx: name for idx, name in names.items() if name in set(seen)}
        for col in self.columns:
            if col.spec is None:
                continue
            for suffix, val in table[col.oid].items():
                if col.per_priority:
                    idx, _, prio = suffix.rpartition(".")
                    extra: tuple[str, ...] = (prio,)
                else:
                    idx, extra = suffix, col.extra
                iname = by_index.get(idx)
                if iname is None:
                    continue
                labels = (tname, iname, *extra)
                key = (col.spec.name, labels)
                prev = sums.get(key)
                value = float(int(val))
                # Ucast + Multicast + Broadcast add into one packets series.
                sums[key] = Sample(col.spec, labels, value + (prev.value if prev else 0.0),
                                   col.width_bits)
        samples.extend(sums.values())
        return Collection(self.name, tuple(samples), (), time.time_ns(),
                          time.perf_counter() - t0, tuple(seen))
