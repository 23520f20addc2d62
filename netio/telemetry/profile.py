"""The fabric profile: measured capacity and load of every link this daemon sees.

``GET /api/profile`` serves :class:`FabricProfile` as JSON (``to_json_dict``);
the performance models consume it, so this module is the schema, versioned by
``SCHEMA_VERSION`` (bump it on any incompatible change).

Units are in the field names: ``_bps`` bits per second, ``_per_s`` events per
second, ``_ratio``/``_fraction`` dimensionless 0..1, ``_unix_s`` seconds since
the epoch, ``_s`` seconds.  ``None`` (JSON ``null``) means "not measured":
the source does not offer it, or there is no previous sample to make a rate
from yet.

Fields:

* ``schema_version`` (int), ``host`` (the daemon's host name), ``generated_unix_s``.
* ``interfaces``: host network interfaces.  ``name``; ``up`` (operational
  state; null when unknown); ``capacity_bps`` is the negotiated speed;
  ``rx_bps``/``tx_bps`` the rate over the last collection interval;
  ``utilisation_ratio`` = max(rx, tx) / capacity; ``pause`` one entry per
  priority with PFC counters: ``priority`` (0..7), ``rx_pause_fraction`` is
  the fraction of time the peer held this host paused, ``tx_pause_fraction``
  the fraction this host held the peer paused, ``rx_pause_frames_per_s`` and
  ``tx_pause_frames_per_s`` the pause frames received and sent, ``lossless``
  whether PFC is enabled on the priority (DCB; null when unknown) and
  ``storm_active`` whether the watchdog sees a storm there now;
  ``pause_fraction_source`` is ``"duration"`` (measured by the NIC, mlx5
  ``*_pause_duration``), ``"frames_estimate"`` (pause frames times the
  maximum pause quanta over the link speed: an upper bound) or ``"none"``.
* ``rdma_ports``: RDMA ports; ``device`` and ``port`` (the port number as a
  string, as in the metric labels); ``capacity_bps`` from sysfs ``rate``;
  ``rx_bps``/``tx_bps`` from the IB PMA data counters (null on rxe, which has
  none); ``rx_packets_per_s``/``tx_packets_per_s``; ``cnp_sent_per_s`` (this
  host as notification point), ``cnp_handled_per_s`` (as reaction point),
  ``ecn_marked_per_s``, ``retransmissions_per_s`` (requester events that cause
  a resend: local ACK timeout, NAK sequence error, implied NAK, RNR NAK; rxe's
  ``completer_retry_err`` replaces the NAK-sequence count when present),
  ``out_of_sequence_per_s`` and ``duplicate_requests_per_s`` (responder's view
  of the peer's resends).
* ``switch_interfaces``: per SNMP ``target`` and ``interface``: ``up``,
  ``capacity_bps``, ``rx_bps``/``tx_bps``, ``utilisation_ratio`` (IF-MIB), and
  ``pfc_requests_per_s`` (pause frames the switch sent) and
  ``pfc_indications_per_s`` (received), all priorities together.
* ``rdma_qps``: the most active QPs (``collectors.rdma_qp.top_n``, by PSN
  advance), from RDMA netlink: ``device``, ``qpn``, ``port`` (null before the
  QP has one), ``type`` (``RC``, ``UD``, ...), ``state`` (``RTS``, ...),
  ``peer_qpn`` (connected QPs), ``local_address``/``peer_address`` (``ip:port``
  of rdma_cm connections, else null), ``sq_psn``/``rq_psn`` (next PSNs),
  ``sq_packets_per_s``/``rq_packets_per_s`` (their advance over the last
  interval), ``owner`` (``pid N`` or the kernel user) and ``counters``
  (driver counters bound to the QP, name -> value).  ``qpn`` and ``peer_qpn``
  are the BTH destination QPs of ``netio-analyze`` flows in each direction.
* ``storms``: the PFC storms active now (watchdog state): ``device``,
  ``direction`` (``rx``: this host is being paused; ``tx``: it pauses its
  peer), ``priority`` and ``since_unix_s``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class PriorityPause:
    priority: int
    rx_pause_fraction: float | None
    tx_pause_fraction: float | None
    rx_pause_frames_per_s: float | None
    tx_pause_frames_per_s: float | None
    lossless: bool | None
    storm_active: bool


@dataclass(frozen=True, slots=True)
class InterfaceProfile:
    name: str
    up: bool | None
    capacity_bps: float | None
    rx_bps: float | None
    tx_bps: float | None
    utilisation_ratio: float | None
    pause_fraction_source: str
    pause: tuple[PriorityPause, ...]


@dataclass(frozen=True, slots=True)
class RdmaPortProfile:
    device: str
    port: str
    capacity_bps: float | None
    rx_bps: float | None
    tx_bps: float | None
    rx_packets_per_s: float | None
    tx_packets_per_s: float | None
    cnp_sent_per_s: float | None
    cnp_handled_per_s: float | None
    ecn_marked_per_s: float | None
    retransmissions_per_s: float | None
    out_of_sequence_per_s: float | None
    duplicate_requests_per_s: float | None


@dataclass(frozen=True, slots=True)
class SwitchInterfaceProfile:
    target: str
    interface: str
    up: bool | None
    capacity_bps: float | None
    rx_bps: float | None
    tx_bps: float | None
    utilisation_ratio: float | None
    pfc_requests_per_s: float | None
    pfc_indications_per_s: float | None


@dataclass(frozen=True, slots=True)
class RdmaQpProfile:
    device: str
    qpn: int
    port: int | None
    type: str
    state: str
    peer_qpn: int | None
    local_address: str | None
    peer_address: str | None
    sq_psn: int | None
    rq_psn: int | None
    sq_packets_per_s: float | None
    rq_packets_per_s: float | None
    owner: str
    counters: dict[str, float]


@dataclass(frozen=True, slots=True)
class ActiveStorm:
    device: str
    direction: str
    priority: int
    since_unix_s: float


@dataclass(frozen=True, slots=True)
class FabricProfile:
    schema_version: int
    host: str
    generated_unix_s: float
    interfaces: tuple[InterfaceProfile, ...]
    rdma_ports: tuple[RdmaPortProfile, ...]
    switch_interfaces: tuple[SwitchInterfaceProfile, ...]
    storms: tuple[ActiveStorm, ...]
    rdma_qps: tuple[RdmaQpProfile, ...] = ()


def to_json_dict(profile: FabricProfile) -> dict[str, Any]:
    """Plain dict (lists, not tuples) ready for ``json.dumps``."""
    return dataclasses.asdict(profile)


def empty_profile(host: str, now_unix_s: float) -> FabricProfile:
    return FabricProfile(SCHEMA_VERSION, host, now_unix_s, (), (), (), ())
