/* Internal interface between the capture-analysis C files (not for cffi).
 *
 * analyze_extract.c classifies one captured frame into a netio_analyze_row;
 * analyze_flows.c runs the per-packet analyses on those rows. */
#ifndef NETIO_ANALYZE_INTERNAL_H
#define NETIO_ANALYZE_INTERNAL_H
#include "netio_native.h"

/* netio.analyze.columns.Kind */
enum { K_OTHER = 0, K_ROCE = 1, K_PFC = 2, K_PAUSE = 3, K_MALFORMED = 4 };
/* netio.analyze.columns.Flag */
enum {
    F_FECN = 0x01, F_BECN = 0x02, F_ACK_REQ = 0x04, F_VLAN = 0x08,
    F_ICRC_CHECKED = 0x10, F_ICRC_OK = 0x20, F_TRUNCATED = 0x40, F_IPV6 = 0x80
};

/* One extracted frame: the fields of one row of netio_analyze_columns. IPv4
 * addresses are in src_ip/dst_ip, IPv6 addresses in src_ip6/dst_ip6 (the
 * other pair is zero). */
typedef struct {
    uint64_t src_mac, dst_mac;
    uint32_t src_ip, dst_ip, dest_qp, psn, msn, reth_len, payload_bytes;
    uint16_t vlan;
    uint8_t kind, flags, pcp, ecn, opcode, syndrome, pfc_cev;
    uint16_t quanta[8];
    uint8_t src_ip6[16], dst_ip6[16];
} netio_analyze_row;

/* Classify and extract one frame of cap captured bytes (orig_len on the
 * wire) into *r, exactly as netio.analyze.extract.extract_one: r->kind is
 * the Kind, a MALFORMED row carries only the TRUNCATED flag. */
void netio_analyze_frame(const uint8_t *f, size_t cap, uint32_t orig_len, int linktype,
                         int verify_icrc, netio_analyze_row *r);

/* Store *r as row i of out (frame_bytes and ts_ns are left to the caller). */
void netio_analyze_store(netio_analyze_columns *out, size_t i, const netio_analyze_row *r);

/* Load row i of cols into *r (the inverse of netio_analyze_store). */
void netio_analyze_load(const netio_analyze_columns *cols, size_t i, netio_analyze_row *r);

#endif
