"""The catalogue of every metric netio-daemon exports.

One place for names, kinds, help and labels, so the exposition, the alert
rules, the dashboard and ``promtool check metrics`` agree.  Conventions
(https://prometheus.io/docs/practices/naming/): ``netio_`` prefix, base units
(seconds, bytes), counters end in ``_total``, priority and direction are
labels, never parts of a name.
"""

from __future__ import annotations

from netio.telemetry.sample import MetricKind, MetricSpec

C = MetricKind.COUNTER
G = MetricKind.GAUGE
U = MetricKind.UNTYPED

# --- network interfaces (netlink RTM_GETLINK / sysfs class/net) -------------------------------
NET_BYTES = MetricSpec("netio_network_bytes_total", C,
                       "Bytes through the interface (IFLA_STATS64).", ("device", "direction"))
NET_PACKETS = MetricSpec("netio_network_packets_total", C,
                         "Packets through the interface.", ("device", "direction"))
NET_ERRORS = MetricSpec("netio_network_errors_total", C,
                        "Packets with errors.", ("device", "direction"))
NET_DROPPED = MetricSpec("netio_network_dropped_packets_total", C,
                         "Packets dropped by the interface.", ("device", "direction"))
NET_CARRIER_CHANGES = MetricSpec("netio_network_carrier_changes_total", C,
                                 "Carrier up/down transitions.", ("device",))
NET_UP = MetricSpec("netio_network_up", G,
                    "1 when the interface's operational state is up.", ("device",))
NET_MTU = MetricSpec("netio_network_mtu_bytes", G,
                     "Interface MTU: the largest IP packet it sends, in bytes.",
                     ("device",))
NET_SPEED = MetricSpec("netio_network_speed_bytes_per_second", G,
                       "Negotiated link speed in bytes/s (sysfs speed in Mb/s / 8 * 1e6); "
                       "absent when the driver reports none.", ("device",))

# --- ethtool, normalised ------------------------------------------------------------------------
PFC_PAUSE_FRAMES = MetricSpec(
    "netio_pfc_pause_frames_total", C,
    "PFC pause frames per priority (rx: received from the peer, tx: sent to it).",
    ("device", "direction", "priority"))
PFC_PAUSE_DURATION = MetricSpec(
    "netio_pfc_pause_duration_seconds_total", C,
    "Time paused per priority (mlx5 *_prioN_pause_duration, which counts microseconds).",
    ("device", "direction", "priority"))
PFC_PAUSE_TRANSITIONS = MetricSpec(
    "netio_pfc_pause_transitions_total", C,
    "XOFF to XON transitions per priority.", ("device", "direction", "priority"))
LINK_PAUSE_FRAMES = MetricSpec("netio_link_pause_frames_total", C,
                               "IEEE 802.3x (global) pause frames.", ("device", "direction"))
PAUSE_STORM_EVENTS = MetricSpec(
    "netio_nic_pause_storm_events_total", C,
    "Times the NIC itself flagged that it kept sending pause frames past its threshold.",
    ("device", "level"))
NIC_DROPPED = MetricSpec(
    "netio_nic_dropped_packets_total", C,
    "Packets the NIC dropped, by reason (port_buffer: rx_discards_phy; "
    "no_receive_buffer: rx_out_of_buffer).", ("device", "direction", "reason"))
NIC_PRIO_BYTES = MetricSpec("netio_nic_priority_bytes_total", C,
                            "Bytes per priority.", ("device", "direction", "priority"))
NIC_PRIO_PACKETS = MetricSpec("netio_nic_priority_packets_total", C,
                              "Packets per priority.", ("device", "direction", "priority"))
NIC_PHY_BYTES = MetricSpec("netio_nic_phy_bytes_total", C,
                           "Bytes counted at the physical port.", ("device", "direction"))
NIC_PHY_PACKETS = MetricSpec("netio_nic_phy_packets_total", C,
                             "Packets counted at the physical port.", ("device", "direction"))
NIC_PHY_ERRORS = MetricSpec("netio_nic_phy_errors_total", C,
                            "Physical-layer errors by kind.", ("device", "kind"))
NIC_ECN_MARKED = MetricSpec("netio_nic_ecn_marked_packets_total", C,
                            "Received packets with ECN CE.", ("device",))
ETHTOOL_OTHER = MetricSpec(
    "netio_ethtool_stat", U,
    "ethtool statistic without a normalised name (only when passthrough is enabled).",
    ("device", "stat"))

# --- RDMA ports (sysfs class/infiniband) ------------------------------------------------------
RDMA_PORT_STATE = MetricSpec("netio_rdma_port_state", G,
                             "IB port state number (4 = ACTIVE).", ("device", "port"))
RDMA_PORT_PHYS_STATE = MetricSpec("netio_rdma_port_physical_state", G,
                                  "IB physical port state number (5 = LinkUp).",
                                  ("device", "port"))
RDMA_PORT_RATE = MetricSpec("netio_rdma_port_rate_bytes_per_second", G,
                            "Port data rate from sysfs 'rate' (e.g. 100 Gb/sec), in bytes/s.",
                            ("device", "port"))
RDMA_BYTES = MetricSpec("netio_rdma_bytes_total", C,
                        "RDMA port data (IB PMA port_*_data words times 4).",
                        ("device", "port", "direction"))
RDMA_PACKETS = MetricSpec("netio_rdma_packets_total", C,
                          "RDMA port packets (PMA or rxe sent_pkts/rcvd_pkts).",
                          ("device", "port", "direction"))
RDMA_PORT_ERRORS = MetricSpec("netio_rdma_port_errors_total", C,
                              "IB PMA port error counters.", ("device", "port", "error"))
RDMA_LINK_DOWNED = MetricSpec("netio_rdma_link_downed_total", C,
                              "Times the link went down.", ("device", "port"))
RDMA_ECN_MARKED = MetricSpec("netio_rdma_ecn_marked_packets_total", C,
                             "RoCE packets received with ECN CE (notification point).",
                             ("device", "port"))
RDMA_CNP = MetricSpec(
    "netio_rdma_cnp_packets_total", C,
    "Congestion notification packets: sent (NP), handled or ignored (RP).",
    ("device", "port", "event"))
RDMA_TRANSPORT = MetricSpec(
    "netio_rdma_transport_events_total", C,
    "RC transport events: sequence errors, NAKs, timeouts, retries, duplicates.",
    ("device", "port", "event"))
RDMA_COMPLETION_ERRORS = MetricSpec(
    "netio_rdma_completion_errors_total", C,
    "Work completions with errors, by side and error.", ("device", "port", "side", "error"))
RDMA_OPERATIONS = MetricSpec("netio_rdma_operations_total", C,
                             "RDMA operations by kind.", ("device", "port", "op"))
# Not "netio_rdma_counter": a type in a metric name is a promtool lint error.
RDMA_OTHER = MetricSpec(
    "netio_rdma_stat", U,
    "RDMA sysfs counter without a normalised name (only when passthrough is enabled).",
    ("device", "port", "stat"))

# --- DCB (RTM_GETDCB, DCB_ATTR_IEEE_PFC) ------------------------------------------------------
DCB_PFC_ENABLED = MetricSpec("netio_pfc_priority_lossless", G,
                             "1 when PFC is enabled (lossless) on this priority.",
                             ("device", "priority"))
DCB_PFC_CAP = MetricSpec("netio_pfc_capable_priorities", G,
                         "How many priorities the device can make lossless.", ("device",))
DCB_PFC_REQUESTS = MetricSpec("netio_dcb_pfc_requests_total", C,
                              "PFC requests (pause frames sent) from DCB netlink.",
                              ("device", "priority"))
DCB_PFC_INDICATIONS = MetricSpec("netio_dcb_pfc_indications_total", C,
                                 "PFC indications (pause frames received) from DCB netlink.",
                                 ("device", "priority"))

# --- switches over SNMP -------------------------------------------------------------------------
SW_BYTES = MetricSpec("netio_switch_bytes_total", C, "IF-MIB ifHCIn/OutOctets.",
                      ("target", "interface", "direction"))
SW_PACKETS = MetricSpec("netio_switch_packets_total", C,
                        "IF-MIB ifHCIn/OutUcastPkts + Multicast + Broadcast.",
                        ("target", "interface", "direction"))
SW_DISCARDS = MetricSpec("netio_switch_discards_total", C, "IF-MIB ifIn/OutDiscards.",
                         ("target", "interface", "direction"))
SW_ERRORS = MetricSpec("netio_switch_errors_total", C, "IF-MIB ifIn/OutErrors.",
                       ("target", "interface", "direction"))
SW_SPEED = MetricSpec("netio_switch_speed_bytes_per_second", G,
                      "IF-MIB ifHighSpeed (Mb/s) in bytes/s.",
                      ("target", "interface"))
SW_UP = MetricSpec("netio_switch_interface_up", G, "IF-MIB ifOperStatus == up(1).",
                   ("target", "interface"))
SW_PFC_REQUESTS = MetricSpec(
    "netio_switch_pfc_requests_total", C,
    "IEEE8021-PFC-MIB ieee8021PfcRequests (pause frames sent), all priorities.",
    ("target", "interface"))
SW_PFC_INDICATIONS = MetricSpec(
    "netio_switch_pfc_indications_total", C,
    "IEEE8021-PFC-MIB ieee8021PfcIndications (pause frames received), all priorities.",
    ("target", "interface"))
SW_PFC_PRIO_REQUESTS = MetricSpec(
    "netio_switch_pfc_priority_requests_total", C,
    "Per-priority PFC requests from a configured vendor table.",
    ("target", "interface", "priority"))
SW_PFC_PRIO_INDICATIONS = MetricSpec(
    "netio_switch_pfc_priority_indications_total", C,
    "Per-priority PFC indications from a configured vendor table.",
    ("target", "interface", "priority"))
SW_UP_TARGET = MetricSpec("netio_switch_up", G,
                          "1 when the last SNMP poll of the target succeeded.", ("target",))
SW_BACKOFF = MetricSpec("netio_switch_backoff_seconds", G,
                        "Current back-off before the next poll of a failing target.",
                        ("target",))

# --- per-QP RDMA (RDMA netlink; only the top-N most active QPs have series of their own) --
RDMA_QPS = MetricSpec("netio_rdma_qps", G, "QPs by type and state (all of them).",
                      ("device", "type", "state"))
RDMA_QP_INFO = MetricSpec(
    "netio_rdma_qp_info", G,
    "Always 1: one of the most active QPs, its port, type, state, peer QPN, rdma_cm "
    "addresses (empty when not known) and owner.",
    ("device", "qpn", "port", "type", "state", "peer_qpn", "local_address", "peer_address",
     "owner"))
RDMA_QP_PSN = MetricSpec("netio_rdma_qp_psn", G,
                         "Next packet sequence number of the QP's send (sq) or receive (rq) "
                         "queue.", ("device", "qpn", "queue"))
RDMA_QP_PSN_RATE = MetricSpec(
    "netio_rdma_qp_psn_advance_per_second", G,
    "PSN advance per second over the last interval: packets the queue sent (sq) or "
    "expected-and-received (rq).", ("device", "qpn", "queue"))
RDMA_QP_COUNTER = MetricSpec("netio_rdma_qp_counter_total", C,
                             "Driver counters bound to the QP (rdma statistic qp).",
                             ("device", "qpn", "counter"))

# Everything above is read by a collector: what an alarm may watch.
COLLECTED_SPECS: tuple[MetricSpec, ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, MetricSpec))

# --- derived signals -----------------------------------------------------------------------------
PAUSE_RATIO = MetricSpec(
    "netio_pfc_paused_ratio", G,
    "Fraction of the last interval paused, per priority (0..1).",
    ("device", "direction", "priority"))
CNP_RATE = MetricSpec("netio_rdma_cnp_packets_per_second", G,
                      "CNPs per second over the last interval (sent + handled).",
                      ("device", "port"))
RETRANS_RATE = MetricSpec(
    "netio_rdma_retransmission_events_per_second", G,
    "Retransmission-triggering events per second over the last interval.",
    ("device", "port"))
RETRANSMISSIONS = MetricSpec(
    "netio_rdma_retransmission_events_total", C,
    "Retransmission-triggering events (the sum of the driver counters that "
    "netio.telemetry.derived.retransmission_events picks, so none is counted twice).",
    ("device", "port"))
UTILISATION = MetricSpec("netio_link_utilisation_ratio", G,
                         "max(rx, tx) bytes per second over link speed (0..1).", ("device",))

# --- PFC storm watchdog ----------------------------------------------------------------------
WD_STORM_ACTIVE = MetricSpec("netio_pfcwd_storm_active", G,
                             "1 while a PFC storm is detected on this priority.",
                             ("device", "direction", "priority"))
WD_DETECTED = MetricSpec("netio_pfcwd_storms_detected_total", C,
                         "PFC storms detected.", ("device", "direction", "priority"))
WD_RESTORED = MetricSpec("netio_pfcwd_storms_restored_total", C,
                         "PFC storms restored.", ("device", "direction", "priority"))
WD_LAST_DURATION = MetricSpec("netio_pfcwd_last_storm_duration_seconds", G,
                              "Duration of the last restored storm.",
                              ("device", "direction", "priority"))

# --- triggered capture ----------------------------------------------------------------------
CAPTURES = MetricSpec("netio_captures_total", C,
                      "Triggered captures by outcome.", ("outcome",))
CAPTURE_BYTES = MetricSpec("netio_capture_directory_bytes", G,
                           "Bytes held in the capture directory.", ())

# --- the daemon's own health -------------------------------------------------------------------
COLLECTOR_UP = MetricSpec("netio_collector_up", G,
                          "1 when the collector's last run completed without a fault.",
                          ("collector",))
COLLECTOR_DURATION = MetricSpec("netio_collector_duration_seconds", G,
                                "Wall time of the collector's last run.", ("collector",))
COLLECTOR_FAULTS = MetricSpec("netio_collector_faults_total", C,
                              "Faults met by the collector, by kind.", ("collector", "kind"))
COLLECTOR_RUNS = MetricSpec("netio_collector_runs_total", C,
                            "Collector runs started.", ("collector",))
COLLECTOR_LAST_SUCCESS = MetricSpec("netio_collector_last_success_timestamp_seconds", G,
                                    "Unix time of the last complete run.", ("collector",))
SCRAPE_DURATION = MetricSpec("netio_scrape_render_duration_seconds", G,
                             "Time the last /metrics body took to render.", ())
SCRAPES = MetricSpec("netio_http_requests_total", C,
                     "HTTP requests served, by path (the endpoints, else 'other') and status code.",
                     ("path", "code"))
CONFIG_RELOADS = MetricSpec("netio_config_reloads_total", C,
                            "SIGHUP reloads by outcome.", ("outcome",))
CONFIG_LAST_RELOAD_OK = MetricSpec("netio_config_last_reload_successful", G,
                                   "1 when the last reload succeeded.", ())
BUILD_INFO = MetricSpec("netio_daemon_build_info", G, "Always 1; version as label.",
                        ("version",))

ALL_SPECS: tuple[MetricSpec, ...] = tuple(
    v for v in list(globals().values()) if isinstance(v, MetricSpec))

ALARM_FIRING = MetricSpec("netio_alarm_firing", G, "1 while a configured alarm fires.",
                          ("alarm",))
ALL_SPECS = (*ALL_SPECS, ALARM_FIRING)
