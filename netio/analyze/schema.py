"""The ``netio-analyze --json`` document: a stable schema with base units.

``SCHEMA_VERSION`` changes only when a key is removed or changes meaning;
keys may be added. All times are seconds (float) relative to
``time_origin_ns`` (the earliest packet of all captures, ns since the epoch),
sizes are bytes, rates bit/s (``_bps``) or per second (``_per_s``), MACs
``aa:bb:..`` strings, IPs dotted strings, QPs integers.

Top level
    schema_version, tool, netio_version, time_origin_ns, native (C fast path used),
    options: the thresholds used (``storm_detection_s``, ``causality_window_s``, ...),
    captures[]: name, path, records, packets, roce_packets, pfc_frames, pause_frames,
        other_packets, malformed_packets, first_ts_s, last_ts_s, duration_s, link_bps,
        complete (read to the end without damage), readable (opened as a capture), warnings[],
    warnings[]: every input problem, naming file and where reading stopped,
    connections[]: RC connections set up by CM MADs (netio.analyze.connections): capture,
        name ("ACTIVE qp 0xQ <-> PASSIVE qp 0xQ (service 0x...)"), service_id,
        active {ip, qpn, starting_psn} (the REQ's sender), passive {...} or null (no REP
        seen), path_mtu_bytes, retry_count, rnr_retry_count, req_s, rep_s, rtu_s, dreq_s,
        drep_s (null when unseen), setup_s (REQ to RTU, or to REP without an RTU),
        teardown_s (DREQ to DREP),
    findings[]: {severity: critical|warning|info, kind, message}, most important first
        (netio.analyze.findings); kind is one of pause_spreading, pfc_storm, input,
        xon_storm, incast, loss, retransmission, read_loss, rnr, nak, icrc, cnp_rate, ecn,
        pause (a sender's pauses outside storms and spreading chains),
    pause_senders[]: one per (capture, src_mac, vlan, kind pfc|pause, priority|null):
        xoff_frames, xon_frames, intervals [[start_s, end_s]...] (union, refreshes
        merged), paused_s, longest_pause_s, paused_fraction (of the capture's
        duration), frame_rate_per_s,
    storms[]: queue keys as above + start_s, end_s, duration_s, detected_s, restored_s,
        intervals (how many paused intervals the storm holds),
    xon_storms[]: queue keys + start_s, end_s, xon_frames, rate_per_s,
    spreading[]: root {capture, src_mac, priority, start_s}, congested_destination,
        converging_flows[], members[] {capture, src_mac, priority, start_s, delay_s},
        victims[] {capture, paused_by, priority, destinations[], flows[] (the paused
        flows that carried data: capture, src_ip, dst_ip, dest_qp, data_bytes)},
    flows[]: capture, src_ip, dst_ip (IPv4 dotted or IPv6 RFC 5952 text; flows are keyed
        on full addresses), dest_qp, priority, src_mac, dst_mac, first_ts_s,
        last_ts_s, packets, bytes (on the wire), payload_bytes, data_bytes (payload of
        first-copy requests and of responses that are not duplicates: what the
        throughput series sums), goodput_bytes (the data the QP moved either way:
        data_bytes of this direction plus data_bytes of the reverse, so a READ's
        data are its responses), goodput_bps (goodput_bytes over the time from the
        first to the last packet of either direction; the text report's "rate" is
        this value),
        opcodes {NAME: packets}, messages, request_packets,
        psn_gaps, psn_gap_packets, duplicate_packets, out_of_order_packets,
        retransmitted_packets, retransmission_ratio,
        read_responses {packets, psn_gaps, psn_gap_packets, duplicate_packets,
        out_of_order_packets, retransmitted_packets} (the READ RESPONSE stream of the
        reverse direction) or null, naks {CODE_NAME: n}, rnr_naks,
        rnr_timer_s[], ack_latency_s, read_latency_s ({count (all samples), min, p50, p90,
        p99, max}, or null; min, max and count exact, the percentiles from a
        netio.analyze.sketch.LatencySketch: the order statistic of rank
        floor(q*(count-1)) within RELATIVE_ERROR = 1/33 while it lies within 2^32 of
        max; at most MAX_SKETCH_BYTES = 4136 bytes per flow and latency kind; a
        QP costs 1.9 KB of peak memory in all, measured, plus about 60 bytes per
        throughput window with data: netio-analyze --help),
        icrc_failures,
        icrc_checked_packets,
        ecn {ect_packets, ce_packets, cnps (CNPs throttling this direction),
        cnp_reaction_s (as the latencies), cnp_rate_violations, fecn_packets, becn_packets},
        throughput {interval_s, start_s[], bps[]}: data throughput (payload of first
        copies and of responses, as bit/s over the window) per window of interval_s
        from time_origin_ns. SPARSE: only windows in which the flow carried data are
        listed (start_s ascending, bps > 0); a window between first_ts_s and last_ts_s
        that is not listed carried nothing (0 bit/s, e.g. while paused). Sparse so the
        document grows with the packets, not with flows x span / interval_s (a dense
        series of a long capture with many flows would dwarf the rest of the document);
        consumers (and netio.analyze.plots) fill the missing windows with 0,
        connection: the name of the connection whose QP this flow is sent to
        (connections[].name) or null,
        reverse {dest_qp, packets, bytes, payload_bytes, data_bytes, opcodes, ecn,
        icrc_failures, request_packets, throughput (as above: the responses' data, e.g. READ
        responses)} or null,
    fairness[]: capture, group destination|egress, key, flows, windows, jain_min,
        jain_mean, worst_window_start_s,
    incast[]: capture, destination, start_s, end_s, max_senders,
    ecn_series: {capture: {interval_s, ce_packets[], cnps[]}}: DENSE, one count per
        interval from time_origin_ns (packets before it count in the first interval)
        up to the capture's last packet, both lists the same length (empty for a
        capture without packets); one list per capture, so its length is the span
        over interval_s, capped at netio.analyze.flows.MAX_SERIES_INTERVALS (marks
        later than that are counted in a warning instead),
    assumptions[]: every assumption the analysis made, in words,
    error: null, or one line saying why the run failed (iperf3's convention: with
        --json a failed run still writes exactly one document). When no capture could
        be read the document is complete and error names each capture's problem; a
        usage error, an interruption or running out of memory writes only
        schema_version, tool, netio_version and error. The exit code
        (netio.cli.exit_codes) says the same.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

#: Keys every document has (tests check them; consumers may rely on them).
TOP_LEVEL_KEYS: tuple[str, ...] = (
    "schema_version", "tool", "netio_version", "time_origin_ns", "native", "options",
    "captures", "warnings", "connections", "findings", "pause_senders", "storms",
    "xon_storms", "spreading", "flows", "fairness", "incast", "ecn_series", "assumptions", "error",
)
