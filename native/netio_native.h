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
 * netio/analyze/extract.py). One pointer per column, n entries each
 * (quanta: 8 per entry); see netio.analyze.columns for the meaning. */
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
/* Flow ids: (src IP, dst IP, dest QP) -> dense id, kept across calls. */
typedef struct netio_flow_table netio_flow_table;
netio_flow_table *netio_flow_table_new(void);
void netio_flow_table_free(netio_flow_table *t);
size_t netio_flow_table_len(const netio_flow_table *t);
void netio_flow_table_keys(const netio_flow_table *t, size_t lo, size_t hi, uint32_t *out);
/* out[i] = id of row i's flow (kind 1 = RoCE), -1 for other rows; 0 or -1 (no memory). */
int netio_flow_ids(netio_flow_table *t, const uint8_t *kind, const uint32_t *src_ip,
                   const uint32_t *dst_ip, const uint32_t *dest_qp, size_t n, int32_t *out);
/* CDEF END */

#endif
