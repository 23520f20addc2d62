/* netio native hot paths. Declarations between CDEF BEGIN/END are read by
 * netio/_ffi_build.py for cffi, so they must stay plain C (no macros). */
#ifndef NETIO_NATIVE_H
#define NETIO_NATIVE_H
#include <stddef.h>
#include <stdint.h>

/* CDEF BEGIN */
/* CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) as zlib.crc32: pass the
 * previous return value as crc to continue a running checksum. */
uint32_t netio_crc32(uint32_t crc, const uint8_t *buf, size_t len);
/* Which CRC implementation netio_crc32 uses: "pclmul" or "slice8". */
const char *netio_crc32_impl(void);
/* The same CRC through one implementation: slicing-by-8, or PCLMULQDQ
 * folding (falls back to slicing-by-8 where the CPU lacks it). */
uint32_t netio_crc32_slice8(uint32_t crc, const uint8_t *buf, size_t len);
uint32_t netio_crc32_pclmul(uint32_t crc, const uint8_t *buf, size_t len);
/* 1 when the CPU has PCLMULQDQ + SSE4.1 and netio_crc32 uses them. */
int netio_crc32_pclmul_supported(void);
/* RoCEv2 ICRC (native/icrc.c) of an IP packet (IPv4/IPv6 header .. end of
 * payload and pad, without the 4 ICRC bytes); -1 if the IP version is not 4
 * or 6 or the packet is shorter than IP + UDP + BTH headers. */
int64_t netio_icrc(const uint8_t *ip_packet, size_t len);
/* Capture scanning (native/pcapscan.c; Python side netio/pcap/scan.py). */
/* Why netio_pcap_scan stopped; mirrors netio.pcap.format.ScanStatus. */
enum netio_scan_status {
    NETIO_SCAN_FULL = 0,
    NETIO_SCAN_END = 1,
    NETIO_SCAN_BLOCK = 2,
    NETIO_SCAN_TRUNCATED_HEADER = 3,
    NETIO_SCAN_TRUNCATED_DATA = 4,
    NETIO_SCAN_CAPLEN_TOO_BIG = 5,
    NETIO_SCAN_BAD_BLOCK_LENGTH = 6,
    NETIO_SCAN_BLOCK_LENGTH_MISMATCH = 7,
    NETIO_SCAN_UNKNOWN_INTERFACE = 8,
    NETIO_SCAN_TIMESTAMP_RANGE = 9,
    NETIO_SCAN_CAPLEN_EXCEEDS_BLOCK = 10
};
/* One pcapng interface: ts_ns = ((units * ts_mul) / ts_div) >> ts_shift
 * + tsoffset_s * 1e9, computed in 128 bits. */
typedef struct {
    uint32_t linktype;
    uint32_t snaplen;
    uint64_t ts_mul;
    uint64_t ts_div;
    uint32_t ts_shift;
    int64_t tsoffset_s;
} netio_pcap_iface;
/* Scan state, kept by the caller between calls. format: 1 classic pcap,
 * 2 pcapng. offset and record_index are advanced; status, block_type
 * (-1: unreadable, 0 for classic pcap), value and limit say why it stopped. */
typedef struct {
    uint32_t format;
    uint32_t big_endian;
    uint32_t ts_unit_ns;
    uint32_t linktype;
    const netio_pcap_iface *ifaces;
    uint32_t n_ifaces;
    uint64_t offset;
    uint64_t record_index;
    uint32_t status;
    int64_t block_type;
    uint64_t value;
    uint64_t limit;
} netio_pcap_scan_state;
/* Fill up to max_records entries of the column arrays from buf[st->offset:]
 * and return how many were filled. */
size_t netio_pcap_scan(const uint8_t *buf, size_t len, netio_pcap_scan_state *st,
                       size_t max_records, int64_t *ts_ns, int64_t *frame_offset,
                       uint32_t *caplen, uint32_t *orig_len, uint16_t *linktype,
                       uint32_t *interface_id);
/* Capture analysis (native/analyze_extract.c, analyze_flows.c; Python side
 * netio/analyze/extract.py and flows.py). One pointer per column, n entries
 * each (quanta: 8 per entry, src_ip6/dst_ip6: 16 bytes per entry); see
 * netio.analyze.columns for the meaning. */
typedef struct {
    int64_t *ts_ns;
    uint64_t *src_mac;
    uint64_t *dst_mac;
    uint32_t *src_ip;
    uint32_t *dst_ip;
    uint32_t *dest_qp;
    uint32_t *psn;
    uint32_t *msn;
    uint32_t *reth_len;
    uint32_t *payload_bytes;
    uint32_t *frame_bytes;
    uint16_t *vlan;
    uint8_t *kind;
    uint8_t *flags;
    uint8_t *pcp;
    uint8_t *ecn;
    uint8_t *opcode;
    uint8_t *syndrome;
    uint8_t *pfc_cev;
    uint16_t *quanta;
    uint8_t *src_ip6;
    uint8_t *dst_ip6;
} netio_analyze_columns;
/* Classify and extract n frames at buf + frame_offset[i] (caplen[i] bytes
 * captured of orig_len[i]); ts_ns is left to the caller. Returns n. */
size_t netio_analyze_extract(const uint8_t *buf, size_t buf_len, const int64_t *frame_offset,
                             const uint32_t *caplen, const uint32_t *orig_len,
                             const uint16_t *linktype, size_t n, int verify_icrc,
                             netio_analyze_columns *out);
/* out[6]: valid, extension header bytes, has payload, RETH offset, AETH
 * offset (after the BTH, -1 if none), UD, as the extractor uses them. */
void netio_analyze_opcode_layout(uint8_t opcode, int32_t *out);
/* Flow keys, 5 words each: dest QP | IPv6 << 32, then the source and the
 * destination address (IPv4: the address and 0; IPv6: high and low 64 bits). */
/* FlowIndex: exact flow keys -> dense ids in order of first appearance. */
typedef struct netio_flow_table netio_flow_table;
netio_flow_table *netio_flow_table_new(void);
void netio_flow_table_free(netio_flow_table *t);
size_t netio_flow_table_len(const netio_flow_table *t);
void netio_flow_table_keys(const netio_flow_table *t, size_t lo, size_t hi, uint64_t *out);
/* out[i] = id of row i's flow (kind 1 = RoCE), -1 for other rows; 0 or -1 (no memory). */
int netio_flow_ids(netio_flow_table *t, const netio_analyze_columns *cols, size_t n,
                   int32_t *out);
/* The per-packet analyses (analyze_flows.c; reference netio.analyze.flows.FlowReference).
 * Per-flow counters, in the order of netio.analyze.flows.COUNTERS. */
enum netio_flow_counter {
    NETIO_FC_PACKETS = 0, NETIO_FC_BYTES = 1, NETIO_FC_PAYLOAD = 2, NETIO_FC_CE = 3,
    NETIO_FC_ECT = 4, NETIO_FC_FECN = 5, NETIO_FC_BECN = 6, NETIO_FC_ICRC_CHECKED = 7,
    NETIO_FC_ICRC_BAD = 8, NETIO_FC_REQUESTS = 9, NETIO_FC_GAPS = 10,
    NETIO_FC_GAP_PACKETS = 11, NETIO_FC_DUPS = 12, NETIO_FC_OOO = 13, NETIO_FC_MESSAGES = 14,
    NETIO_FC_GOODPUT = 15, NETIO_FC_RNR = 16, NETIO_FC_CNPS = 17, NETIO_FC_DATA_PAYLOAD = 18,
    NETIO_FC_NAKS = 19, NETIO_FC_RR_PACKETS = 20, NETIO_FC_RR_GAPS = 21,
    NETIO_FC_RR_GAP_PACKETS = 22, NETIO_FC_RR_DUPS = 23, NETIO_FC_RR_OOO = 24,
    NETIO_FC_CNP_VIOLATIONS = 25, NETIO_FC_CNP_UNMATCHED = 26, NETIO_FC_SRC_MAC = 27,
    NETIO_FC_DST_MAC = 28, NETIO_FC_PCP = 29, NETIO_FC_FIRST_TS = 30, NETIO_FC_LAST_TS = 31,
    NETIO_FC_PAIR = 32, NETIO_FC_RNR_CODES = 33, NETIO_FC_COUNT = 34
};
/* Bits of netio_analyzer_config.opflags (from netio.wire.bth.OPCODE_TABLE). */
enum netio_opflag {
    NETIO_OPF_REQUEST = 1, NETIO_OPF_RESPONSE = 2, NETIO_OPF_ACKNOWLEDGE = 4,
    NETIO_OPF_READ_REQUEST = 8, NETIO_OPF_READ_RESPONSE = 16,
    NETIO_OPF_READ_RESPONSE_FIRST = 32, NETIO_OPF_RESPONSE_MIDDLE_LAST = 64,
    NETIO_OPF_ENDS_MESSAGE = 128, NETIO_OPF_AETH = 256, NETIO_OPF_CNP = 512
};
enum netio_flow_limits {
    NETIO_SKETCH_SUB_BITS = 4, NETIO_SKETCH_MAX_BINS = 512, NETIO_FLOW_MAX_MISSING = 4096,
    NETIO_FLOW_MAX_PENDING = 1024, NETIO_FLOW_OPCODE_SLOTS = 64
};
enum netio_flow_filter_bits {
    NETIO_FLOW_FILTER_SRC = 1, NETIO_FLOW_FILTER_DST = 2, NETIO_FLOW_FILTER_QP = 4,
    NETIO_FLOW_FILTER_IPV6 = 8 /* the addresses are IPv6 (flow_*_ip6), else IPv4 */
};
/* netio_analyzer_summary: rows per Kind (0..4), rows kept, first and last ts. */
enum netio_analyzer_summary_index {
    NETIO_AS_ROWS = 5, NETIO_AS_FIRST_TS = 6, NETIO_AS_LAST_TS = 7, NETIO_ANALYZER_SUMMARY = 8
};
typedef struct {
    int64_t origin_ns;      /* interval bins count from here */
    int64_t interval_ns;
    int64_t cnp_min_gap_ns;
    int64_t start_ns;       /* rows with start_ns <= ts < end_ns are kept */
    int64_t end_ns;
    uint32_t roce_pcp_mask; /* bit p: RoCE tagged with PCP p kept; bit 8: untagged kept */
    uint32_t flow_filter;   /* netio_flow_filter_bits */
    uint32_t flow_src_ip;
    uint32_t flow_dst_ip;
    uint32_t flow_dest_qp;
    uint8_t flow_src_ip6[16];  /* network order, with NETIO_FLOW_FILTER_IPV6 */
    uint8_t flow_dst_ip6[16];
    int32_t verify_icrc;
    uint16_t opflags[256];
    uint8_t opslot[256];    /* opcode -> slot of the per-flow opcode counts */
} netio_analyzer_config;
typedef struct netio_analyzer netio_analyzer;
netio_analyzer *netio_analyzer_new(const netio_analyzer_config *cfg);
void netio_analyzer_free(netio_analyzer *a);
/* Classify, filter and analyse n scanned records (as netio_analyze_extract
 * takes them, with their timestamps); PFC/PAUSE rows are appended to ctl from
 * row *ctl_n on (at most ctl_cap rows). 0, -1 (no memory) or -2 (ctl full). */
int netio_analyzer_feed(netio_analyzer *a, const uint8_t *buf, size_t buf_len,
                        const int64_t *ts_ns, const int64_t *frame_offset,
                        const uint32_t *caplen, const uint32_t *orig_len,
                        const uint16_t *linktype, size_t n, netio_analyze_columns *ctl,
                        size_t ctl_cap, size_t *ctl_n);
/* The RoCE rows of already extracted (and filtered) columns. 0 or -1. */
int netio_analyzer_feed_columns(netio_analyzer *a, const netio_analyze_columns *cols, size_t n);
void netio_analyzer_summary(const netio_analyzer *a, int64_t *out);
size_t netio_analyzer_flows(const netio_analyzer *a);
/* Per flow: 5 key words and NETIO_FC_COUNT counters (either may be NULL). */
void netio_analyzer_export(const netio_analyzer *a, uint64_t *keys, int64_t *counters);
/* Free everything but the flow count and counters (after the other exports),
 * so that the counters are copied out with the rest of the state gone. */
void netio_analyzer_shed(netio_analyzer *a);
/* The non-zero packet counts per opcode slot (which 0) or NAK code (which 1)
 * of every flow, as (flow, slot or code, count) int64 triples ordered by flow
 * then slot/code: how many, then the triples themselves. */
size_t netio_analyzer_sparse_len(const netio_analyzer *a, int which);
void netio_analyzer_sparse(const netio_analyzer *a, int which, int64_t *out);
/* Latency sketches (0 ACK latency, 1 READ latency, 2 CNP reaction, ns; see
 * netio.analyze.sketch) with samples: how many; then per sketch, in flow and
 * kind order, 6 values (flow * 3 + kind, lowest bucket, bucket count, sample
 * count, min, max) into headers; returns the total bucket count, which
 * netio_analyzer_sketch_bins writes into out in the same order. */
size_t netio_analyzer_sketch_count(const netio_analyzer *a);
size_t netio_analyzer_sketches(const netio_analyzer *a, int64_t *headers);
void netio_analyzer_sketch_bins(const netio_analyzer *a, int64_t *out);
/* Series entries (which: 0 data bytes per (flow, interval), 1 CE marks, 2
 * CNPs per interval) as (flow or -1, interval, value) triples, unsorted. */
size_t netio_analyzer_series_len(const netio_analyzer *a, int which);
/* The data series (which 0) ordered by flow then interval, the values of one
 * (flow, interval) summed, as three columns (room for series_len(a, 0) each);
 * returns how many rows, SIZE_MAX without memory. */
size_t netio_analyzer_flow_series(const netio_analyzer *a, int64_t *fid_out, int64_t *bin_out,
                                  int64_t *val_out);
void netio_analyzer_series(const netio_analyzer *a, int which, int64_t *out);
/* Sysfs counters (native/sysfs_counters.c; Python side netio.telemetry.sysfs.
 * CounterReader). pread(fds[i], 32 bytes, offset 0) for each of n kept
 * descriptors; status[i] is 0 when the text is a plain decimal (whitespace,
 * digits that fit in 64 bits, whitespace) and values[i] holds it, the errno
 * when the read failed, -1 otherwise (N/A, a sign, longer text: the caller
 * reads that file itself). Returns how many status[i] are not 0. */
size_t netio_sysfs_read_counters(const int *fds, size_t n, uint64_t *values, int32_t *status);
/* The soft RoCEv2 data path (native/softpath.c; Python side
 * netio/roce/native_path.py). */
/* Layout-compatible with struct iovec. */
typedef struct {
    void *base;
    size_t len;
} netio_iov;
typedef struct {
    const uint8_t *ptr;
    uint64_t len;
} netio_sge;
/* One SEND/WRITE message: addresses host order; opcodes chosen by the engine. */
typedef struct {
    uint32_t src_ip;
    uint32_t dst_ip;
    uint32_t src_port;
    uint32_t pkey;
    uint32_t dest_qp;
    uint32_t mtu;
    uint32_t npkts;
    uint32_t rc;
    uint32_t solicited;
    uint32_t has_reth;
    uint32_t has_imm;
    uint32_t imm;
    uint32_t rkey;
    uint8_t op_first;
    uint8_t op_middle;
    uint8_t op_last;
    uint8_t op_only;
    uint64_t va;
    uint64_t length;
} netio_tx_msg;
/* Packets built by netio_tx_build: per packet a header slot of
 * NETIO_TX_SLOT_BYTES in hdr (trailer at NETIO_TX_TRAILER_OFFSET), and
 * iovcnt[j] iovecs from iov[iovstart[j]]. */
enum { NETIO_TX_SLOT_BYTES = 64, NETIO_TX_TRAILER_OFFSET = 48 };
typedef struct {
    uint8_t *hdr;
    netio_iov *iov;
    uint32_t *iovstart;
    uint32_t *iovcnt;
    uint32_t max_pkts;
    uint32_t max_iov;
    uint32_t count;
    uint64_t payload_bytes;
} netio_tx_batch;
/* Append packets k0 .. k0+count-1 of message m (PSNs from psn0) to b after
 * its b->count packets; *noack_pkts carries the AckReq counter. Returns the
 * iovecs b uses, or -errno (-ENOBUFS: b is full; b is then unchanged). */
int netio_tx_build(const netio_tx_msg *m, const netio_sge *sge, uint32_t nsge, uint32_t k0,
                   uint32_t psn0, uint32_t count, uint32_t *noack_pkts, netio_tx_batch *b);
/* Append one whole packet (BTH .. ICRC, at most NETIO_TX_SLOT_BYTES: an ACK
 * built by the engine) to b, copied into its header slot, so that it leaves
 * in the same sendmmsg as the packets around it. Returns the iovecs b uses, or
 * -ENOBUFS (b full) / -EINVAL (too long). */
int netio_tx_append_packet(netio_tx_batch *b, const uint8_t *pkt, uint32_t len);
/* Append an RC ACKNOWLEDGE (BTH + AETH aeth, ICRC for the IPv4 header the
 * kernel emits: ID 0, DF) for PSN psn to QP dest_qp; as netio_tx_append_packet. */
int netio_tx_ack(netio_tx_batch *b, uint32_t src_ip, uint32_t dst_ip, uint32_t src_port,
                 uint32_t pkey, uint32_t dest_qp, uint32_t psn, uint32_t aeth);
/* sendmmsg packets start.. of b to dst_ip:4791; returns how many went, or
 * -errno when none did. */
int netio_tx_send(int fd, uint32_t dst_ip, const netio_tx_batch *b, uint32_t start);
/* As netio_tx_send, but each run of equal-size packets (then at most one
 * shorter) goes as one datagram with a UDP_SEGMENT cmsg (UDP GSO: the kernel
 * cuts it back into those packets), at most 64 packets and 65507 bytes a run;
 * the rest go alone. Same return. */
int netio_tx_send_gso(int fd, uint32_t dst_ip, const netio_tx_batch *b, uint32_t start);
/* A receive ring: nslots slots of slot_bytes; after netio_rx_recv, count
 * datagrams with their length, truncation flag and source (host order). raw:
 * the slots hold whole IPv4 packets (raw socket). */
typedef struct {
    uint8_t *buf;
    uint32_t slot_bytes;
    uint32_t nslots;
    uint32_t count;
    int32_t raw;
    uint32_t *len;
    uint8_t *truncated;
    uint32_t *src_ip;
    uint32_t *src_port;
    /* where datagram i starts in buf; len, truncated, src_ip, src_port and off
     * hold max_count entries (at least nslots) */
    uint32_t *off;
    uint32_t max_count;
    /* gro: the socket has UDP_GRO on: buf is received in 65536-byte regions
     * and each coalesced buffer is split at the UDP_GRO cmsg's segment size
     * into datagrams (at most 64 a region; no copy: off points at them) */
    int32_t gro;
    /* set by netio_rx_recv: recvmmsg filled every message it offered, so more
     * may be waiting (with gro, count says nothing about that: one message can
     * hold up to 64 datagrams, and a full receive may yield fewer than nslots) */
    int32_t full;
    /* gro: the buffers so far that held more than one datagram (coalesced) */
    uint64_t coalesced;
} netio_rx_ring;
/* recvmmsg (non-blocking) into r; returns the datagram count or -errno. */
int netio_rx_recv(int fd, netio_rx_ring *r);
/* A QP's receive state as the engine left it. A message in progress: the next
 * MIDDLE packet (opcode middle_opcode, PSN expected_psn, from remote_ip with
 * pkey) lands at dst, room bytes are contiguous there (middle_opcode
 * 0xFFFFFFFF: none). idle: no message in progress, so an RC SEND ONLY (with
 * immediate) lands in the next of the nrecv loaded receives (recv_addr[i],
 * recv_room[i] contiguous bytes; recv_used of them consumed) and an RC WRITE
 * ONLY (with immediate: it consumes a receive) lands in the cached region
 * (wc_rkey names [wc_va, wc_va + wc_len) at host address wc_addr; write_ok 0:
 * no cache or REMOTE_WRITE not allowed). msn counts completed messages. */
typedef struct {
    uint32_t qpn;
    uint32_t middle_opcode;
    uint32_t remote_ip;
    uint32_t pkey;
    uint32_t expected_psn;
    uint32_t mtu;
    uint8_t *dst;
    uint64_t room;
    uint64_t received;
    uint64_t placed_packets;
    uint64_t placed_bytes;
    uint32_t idle;
    uint32_t msn;
    uint32_t write_ok;
    uint32_t wc_rkey;
    uint64_t wc_va;
    uint64_t wc_len;
    uint64_t wc_addr;
    uint32_t nrecv;
    uint32_t recv_used;
    uint64_t *recv_addr;
    uint64_t *recv_room;
    uint32_t ack_owed;
    uint32_t ack_psn;
    uint32_t acks; /* 1: the QP's requester takes responses (send states) */
} netio_rx_fast;
/* An event of the native receive path, in arrival order: a completion of
 * context ctx from its receive recv (an index into the loaded receives) with
 * byte_len and imm, kind 0 RECV, 1 RECV with immediate, 2 RECV_RDMA_WITH_IMM;
 * or kind 3, an ACK (AETH syndrome ACK) for context ctx's requester with PSN
 * imm, for the engine's completer. */
typedef struct {
    uint32_t ctx;
    uint32_t recv;
    uint32_t byte_len;
    uint32_t imm;
    uint32_t kind;
} netio_rx_wc;
/* Place in-order packets from slot start on: MIDDLE packets of a message in
 * progress, and ONLY SEND/WRITE packets of an idle context (their completions
 * appended to wc, *nwc of max_wc), and pass on plain ACKs (events of kind 3).
 * Stops at the first other packet. A packet
 * asking for an ACK: with coalesce, the context's ack_owed/ack_psn are set and
 * the run goes on; without, the run stops after it (*ack_ctx = its context
 * index, else 0xFFFFFFFF). Returns the index of the first slot not consumed. */
int64_t netio_rx_fast_run(netio_rx_ring *r, uint32_t start, uint32_t local_ip, int verify_icrc,
                          netio_rx_fast *ctx, uint32_t nctx, int coalesce, netio_rx_wc *wc,
                          uint32_t max_wc, uint32_t *nwc, uint32_t *ack_ctx);
/* A ping-pong of RC SEND messages on one soft-engine QP in one call
 * (native/softpingpong.c; Python side netio/backends/soft/pingpong.py). The
 * caller lends the QP's sequence state (all its sent PSNs acknowledged, no
 * message in progress) and takes it back after; see softpingpong.c. */
enum netio_pp_status {
    NETIO_PP_OK = 0,
    NETIO_PP_RETRY_EXCEEDED = 1, /* retry_cnt local ACK timeouts in a row */
    NETIO_PP_IDLE = 2,           /* nothing from the peer for idle_timeout_ns */
    NETIO_PP_NAK = 3,            /* the peer NAKed (nak_aeth) */
    NETIO_PP_SOCKET = 4,         /* a socket call failed (err = -errno) */
    NETIO_PP_TOO_LONG = 5,       /* a message longer than the buffer or the MTU (err = bytes) */
    NETIO_PP_MALFORMED = 6,      /* a request shorter than its headers */
    NETIO_PP_RNR_RETRY_EXCEEDED = 7, /* an RNR NAK with no RNR retry left (nak_aeth) */
    NETIO_PP_INVALID = 8,        /* no ring, MTU or window, or a message of 2^22 packets+ */
    NETIO_PP_UNEXPECTED = 9      /* another message in place of the answer (err = opcode) */
};
typedef struct {
    int32_t rx_fd;           /* the engine's receive socket (UDP or raw), non-blocking */
    int32_t tx_fd;           /* the QP's send socket (its UDP source port) */
    uint32_t local_ip;       /* host order */
    uint32_t remote_ip;
    uint32_t src_port;
    uint32_t pkey;
    uint32_t qpn;
    uint32_t dest_qp;
    uint32_t mtu;
    uint32_t window;         /* PSNs sent and not acknowledged at most */
    int32_t verify_icrc;
    netio_rx_ring *ring;
    /* the QP's sequence state: in on entry, out on return */
    uint32_t sq_psn;         /* next PSN to send (every earlier one acknowledged on entry) */
    uint32_t rq_psn;         /* next PSN the responder expects */
    uint32_t msn;
    uint32_t ack_owed;       /* an ACK of rq_psn - 1 goes out with the next packet */
    /* the messages */
    const uint8_t *send_buf;
    uint32_t send_bytes;
    uint8_t *recv_buf;
    uint32_t recv_room;
    uint32_t received_bytes; /* of the last request taken */
    uint32_t count;          /* round trips */
    uint32_t initiator;      /* 1: send, then wait for the answer; 0: wait, then answer */
    uint32_t answer_first;   /* answerer: the first request came before the call */
    /* timers (CLOCK_MONOTONIC ns) */
    int64_t ack_timeout_ns;  /* local ACK timeout; 0: none */
    uint32_t retry_cnt;
    uint32_t rnr_retry;      /* RNR NAKs resent after (7: for ever) */
    const int64_t *rnr_wait_ns; /* the RNR NAK delay of each timer code (IBTA table 45) */
    int64_t idle_timeout_ns; /* give up after this long with nothing from the peer */
    int64_t spin_ns;         /* busy-poll this long before sleeping in poll(2) */
    /* results */
    int64_t *rtt_ns;         /* initiator: count round-trip times */
    uint32_t done;           /* round trips completed */
    uint32_t status;         /* enum netio_pp_status */
    uint32_t nak_aeth;
    int32_t err;
    uint64_t packets_sent;
    uint64_t packets_received;
    uint32_t retransmits;
    uint32_t duplicates;
    uint32_t rnr_naks;
    uint32_t dropped;        /* requests past a gap (the peer resends them) */
    /* datagrams set aside for the engine, in arrival order: records of u32
     * bytes, u32 source IPv4, u32 source port, then the bytes padded to 4 */
    uint8_t *defer_buf;
    uint32_t defer_cap;
    uint32_t defer_len;
    uint32_t defer_count;
    uint32_t defer_lost;     /* did not fit defer_buf (lost, as a full socket would) */
} netio_pingpong;
/* Run pp->count round trips; 0, or -1 with pp->status saying why (the QP state
 * fields then say how far it got). */
int netio_pingpong_run(netio_pingpong *pp);
/* Plain UDP peer for bench/ (native/udpbench.c): sendmmsg count datagrams of
 * data[0:size] to dst_ip:port (host order); returns how many or -errno. */
int64_t netio_udp_blast(int fd, uint32_t dst_ip, uint32_t port, const uint8_t *data,
                        uint32_t size, uint64_t count);
/* recvmmsg until count datagrams or idle_ms without any; returns the count
 * (bytes, and the monotonic ns of the first and last batch, through the
 * pointers) or -errno. buf holds 64 slots of slot_bytes. */
int64_t netio_udp_sink(int fd, uint8_t *buf, uint32_t slot_bytes, uint64_t count,
                       int idle_ms, uint64_t *bytes, uint64_t *first_ns, uint64_t *last_ns);
/* CDEF END */

#endif
