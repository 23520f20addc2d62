/* Frame classification, shared by the extractor (analyze_extract.c) and the
 * fused analysis pass (analyze_flows.c) so that both inline it. See
 * analyze_extract.c for what it mirrors. */
#ifndef NETIO_ANALYZE_CLASSIFY_H
#define NETIO_ANALYZE_CLASSIFY_H
#include <string.h>

#include "analyze_internal.h"

/* Per opcode (IBTA Table 38/39, as netio.wire.bth.OPCODE_TABLE): valid,
 * extension header bytes, has payload, offset of RETH / AETH after the BTH
 * (-1 if absent), UD transport. */
typedef struct {
    int8_t valid;
    int8_t ext_bytes;
    int8_t has_payload;
    int8_t reth_off;
    int8_t aeth_off;
    int8_t ud;
} op_layout;

extern op_layout netio_analyze_ops[256];
extern int netio_analyze_ops_ready;
void netio_analyze_init_ops(void);

static inline uint32_t be16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t be24(const uint8_t *p) {
    return ((uint32_t)p[0] << 16) | ((uint32_t)p[1] << 8) | p[2];
}
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t mac48(const uint8_t *p) {
    return ((uint64_t)be16(p) << 32) | be32(p + 2);
}

/* Returns the row kind; fills r. Mirrors extract_one / decode_frame. */
static inline int classify(const uint8_t *f, size_t cap, int linktype, int verify,
                           netio_analyze_row *r) {
    size_t off;
    uint32_t etype;
    if (linktype == 1) {                  /* Ethernet */
        if (cap < 14) return K_MALFORMED;
        r->dst_mac = mac48(f);
        r->src_mac = mac48(f + 6);
        etype = be16(f + 12);
        off = 14;
    } else if (linktype == 113) {         /* Linux SLL */
        if (cap < 16) return K_MALFORMED;
        etype = be16(f + 14);
        off = 16;
    } else if (linktype == 276) {         /* Linux SLL2 */
        if (cap < 20) return K_MALFORMED;
        etype = be16(f);
        off = 20;
    } else if (linktype == 101) {         /* raw IP */
        if (cap < 1) return K_MALFORMED;
        int v = f[0] >> 4;
        if (v == 4) etype = 0x0800;
        else if (v == 6) etype = 0x86DD;
        else return K_MALFORMED;
        off = 0;
    } else if (linktype == 228) {
        etype = 0x0800; off = 0;
    } else if (linktype == 229) {
        etype = 0x86DD; off = 0;
    } else {
        return K_MALFORMED;
    }
    int ntags = 0;
    while (etype == 0x8100 || etype == 0x88A8 || etype == 0x9100) {
        if (ntags == 4) return K_MALFORMED;
        if (cap - off < 4) return K_MALFORMED;
        uint32_t tci = be16(f + off);
        if (ntags == 0) {
            r->flags |= F_VLAN;
            r->pcp = (uint8_t)(tci >> 13);
            r->vlan = (uint16_t)(tci & 0xFFF);
        }
        etype = be16(f + off + 2);
        off += 4;
        ntags++;
    }
    size_t l3_end, l4, l3_off = off;
    int proto;
    if (etype == 0x0800) {
        size_t avail = cap - off;
        if (avail < 20) return K_MALFORMED;
        const uint8_t *ip = f + off;
        if (ip[0] >> 4 != 4) return K_MALFORMED;
        size_t hlen = (size_t)(ip[0] & 0xF) * 4;
        if (hlen < 20) return K_MALFORMED;
        if (avail < hlen) return K_MALFORMED;
        size_t total = be16(ip + 2);
        if (total < hlen) return K_MALFORMED;
        uint32_t ff = be16(ip + 6);
        int frag = (ff & 0x2000) || (ff & 0x1FFF);
        proto = frag ? -1 : ip[9];
        r->ecn = ip[1] & 3;
        r->src_ip = be32(ip + 12);
        r->dst_ip = be32(ip + 16);
        l3_end = off + total;
        l4 = off + hlen;
    } else if (etype == 0x86DD) {
        if (cap - off < 40) return K_MALFORMED;
        const uint8_t *ip = f + off;
        uint32_t word = be32(ip);
        if (word >> 28 != 6) return K_MALFORMED;
        r->ecn = (word >> 20) & 3;
        memcpy(r->src_ip6, ip + 8, 16);
        memcpy(r->dst_ip6, ip + 24, 16);
        r->flags |= F_IPV6;
        proto = ip[6];
        l3_end = off + 40 + be16(ip + 4);
        l4 = off + 40;
    } else if (etype == 0x8808) {         /* MAC Control */
        if (cap - off < 2) return K_MALFORMED;
        uint32_t opc = be16(f + off);
        if (opc == 0x0101) {
            if (cap - off < 20) return K_MALFORMED;
            r->pfc_cev = f[off + 3];
            for (int p = 0; p < 8; p++) r->quanta[p] = (uint16_t)be16(f + off + 4 + 2 * p);
            return K_PFC;
        }
        if (opc == 0x0001) {
            if (cap - off < 4) return K_MALFORMED;
            r->quanta[0] = (uint16_t)be16(f + off + 2);
            return K_PAUSE;
        }
        return K_OTHER;
    } else {
        return K_OTHER;
    }
    /* _decode_l4 */
    int truncated = l3_end > cap;
    size_t captured = truncated ? cap : l3_end;
    if (proto != 17) return K_OTHER;
    if (truncated && captured - l4 < 8) return K_OTHER;
    if (l3_end - l4 < 8) return K_MALFORMED;
    if (cap - l4 < 8) return K_MALFORMED;
    size_t udp_len = be16(f + l4 + 4);
    if (udp_len < 8) return K_MALFORMED;
    size_t udp_end = l4 + udp_len;
    if (udp_end > l3_end) return K_MALFORMED;
    if (be16(f + l4 + 2) != 4791) return K_OTHER;
    /* _decode_roce */
    size_t start = l4 + 8, end = udp_end;
    int trunc2 = captured < end;
    if (end - start < 16) return K_MALFORMED;
    if (captured < start + 12) return K_MALFORMED;       /* headers cut short */
    const uint8_t *b = f + start;
    const op_layout *lay = &netio_analyze_ops[b[0]];
    if (!lay->valid) return K_MALFORMED;
    size_t pad = (b[1] >> 4) & 3;
    size_t hdr_end = start + 12 + (size_t)lay->ext_bytes;
    if (hdr_end > end - 4) return K_MALFORMED;
    if (end - 4 - pad < hdr_end) return K_MALFORMED;
    size_t payload_end = end - 4 - pad;
    if (!lay->has_payload && payload_end != hdr_end) return K_MALFORMED;
    if (hdr_end > captured) return K_MALFORMED;          /* headers cut short */
    uint32_t syndrome = 0, msn = 0;
    if (lay->aeth_off >= 0) {
        uint32_t w = be32(b + 12 + lay->aeth_off);
        if (w & 0x80000000u) return K_MALFORMED;         /* AETH reserved bit */
        syndrome = w >> 24;
        msn = w & 0xFFFFFF;
    }
    uint32_t dest_qp = be24(b + 5);
    if (lay->ud && dest_qp == 1 && payload_end - hdr_end < 24) return K_MALFORMED;
    r->opcode = b[0];
    r->dest_qp = dest_qp;
    r->psn = be24(b + 9);
    if (b[4] & 0x80) r->flags |= F_FECN;
    if (b[4] & 0x40) r->flags |= F_BECN;
    if (b[8] & 0x80) r->flags |= F_ACK_REQ;
    if (lay->aeth_off >= 0) {
        r->syndrome = (uint8_t)syndrome;
        r->msn = msn;
    }
    if (lay->reth_off >= 0) r->reth_len = be32(b + 12 + lay->reth_off + 12);
    r->payload_bytes = (uint32_t)(udp_len - 8 - 12 - (size_t)lay->ext_bytes - pad - 4);
    if (verify && !trunc2) {
        /* ICRC over the IP packet up to the end of the UDP datagram (Annex A17.8). */
        int64_t c = netio_icrc(f + l3_off, udp_end - 4 - l3_off);
        const uint8_t *s4 = f + udp_end - 4;
        uint32_t stored = (uint32_t)s4[0] | ((uint32_t)s4[1] << 8) | ((uint32_t)s4[2] << 16) |
                          ((uint32_t)s4[3] << 24);
        r->flags |= F_ICRC_CHECKED;
        if (c >= 0 && (uint32_t)c == stored) r->flags |= F_ICRC_OK;
    }
    return K_ROCE;
}

typedef uint8_t netio_zv16 __attribute__((vector_size(16), aligned(1), may_alias));

/* memset(r, 0, sizeof *r) as seven 16-byte stores (compilers emit a slow
 * `rep stos` for the memset; this runs once per frame). */
static inline void zero_row(netio_analyze_row *r) {
    _Static_assert(sizeof(netio_analyze_row) == 104, "zero_row covers 104 bytes");
    netio_zv16 z = {0};
    unsigned char *p = (unsigned char *)r;
    *(netio_zv16 *)(p + 0) = z;
    *(netio_zv16 *)(p + 16) = z;
    *(netio_zv16 *)(p + 32) = z;
    *(netio_zv16 *)(p + 48) = z;
    *(netio_zv16 *)(p + 64) = z;
    *(netio_zv16 *)(p + 80) = z;
    *(netio_zv16 *)(p + 88) = z;
}

static inline void analyze_frame(const uint8_t *f, size_t cap, uint32_t orig_len,
                                 int linktype, int verify_icrc, netio_analyze_row *r) {
    if (!netio_analyze_ops_ready) netio_analyze_init_ops();
    zero_row(r);
    int kind = classify(f, cap, linktype, verify_icrc, r);
    if (kind == K_MALFORMED) zero_row(r);
    r->kind = (uint8_t)kind;
    if (cap < orig_len) r->flags |= F_TRUNCATED;
}

#endif
