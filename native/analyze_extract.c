/* Capture analysis fast path: captured frames -> per-field columns.
 *
 * The reference is netio.analyze.extract.extract_one (built on
 * netio.wire.packet.decode_frame); every check below mirrors a DecodeError
 * the Python codec raises, in the same order, so both classify every frame
 * the same way (tests/test_analyze_extract.py proves it, fuzzing included).
 * Header layouts: IEEE 802.1Q, RFC 791/8200/768, IBTA vol 1 §9.2-9.3 and
 * Annex A17 (RoCEv2), IEEE 802.1Qbb / 802.3 Annex 31B (PFC/PAUSE).
 */
#include <stdlib.h>
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

static op_layout g_ops[256];
static int g_ops_ready;

static void set_rc_uc(int low, int ext, int payload, int reth, int aeth) {
    op_layout l = {1, (int8_t)ext, (int8_t)payload, (int8_t)reth, (int8_t)aeth, 0};
    g_ops[low] = l;
    g_ops[0x20 | low] = l;
}

static void init_ops(void) {
    if (g_ops_ready)
        return;
    memset(g_ops, 0, sizeof g_ops);
    set_rc_uc(0x00, 0, 1, -1, -1);   /* SEND FIRST */
    set_rc_uc(0x01, 0, 1, -1, -1);   /* SEND MIDDLE */
    set_rc_uc(0x02, 0, 1, -1, -1);   /* SEND LAST */
    set_rc_uc(0x03, 4, 1, -1, -1);   /* SEND LAST with IMM */
    set_rc_uc(0x04, 0, 1, -1, -1);   /* SEND ONLY */
    set_rc_uc(0x05, 4, 1, -1, -1);   /* SEND ONLY with IMM */
    set_rc_uc(0x06, 16, 1, 0, -1);   /* WRITE FIRST (RETH) */
    set_rc_uc(0x07, 0, 1, -1, -1);   /* WRITE MIDDLE */
    set_rc_uc(0x08, 0, 1, -1, -1);   /* WRITE LAST */
    set_rc_uc(0x09, 4, 1, -1, -1);   /* WRITE LAST with IMM */
    set_rc_uc(0x0A, 16, 1, 0, -1);   /* WRITE ONLY (RETH) */
    set_rc_uc(0x0B, 20, 1, 0, -1);   /* WRITE ONLY with IMM (RETH, ImmDt) */
    set_rc_uc(0x0C, 16, 0, 0, -1);   /* READ REQUEST (RETH) */
    set_rc_uc(0x0D, 4, 1, -1, 0);    /* READ RESPONSE FIRST (AETH) */
    set_rc_uc(0x0E, 0, 1, -1, -1);   /* READ RESPONSE MIDDLE */
    set_rc_uc(0x0F, 4, 1, -1, 0);    /* READ RESPONSE LAST (AETH) */
    set_rc_uc(0x10, 4, 1, -1, 0);    /* READ RESPONSE ONLY (AETH) */
    set_rc_uc(0x11, 4, 0, -1, 0);    /* ACKNOWLEDGE (AETH) */
    set_rc_uc(0x12, 12, 0, -1, 0);   /* ATOMIC ACKNOWLEDGE (AETH, AtomicAckETH) */
    set_rc_uc(0x13, 28, 0, -1, -1);  /* COMPARE SWAP (AtomicETH) */
    set_rc_uc(0x14, 28, 0, -1, -1);  /* FETCH ADD (AtomicETH) */
    set_rc_uc(0x16, 4, 1, -1, -1);   /* SEND LAST with INVALIDATE (IETH) */
    set_rc_uc(0x17, 4, 1, -1, -1);   /* SEND ONLY with INVALIDATE (IETH) */
    set_rc_uc(0x1C, 20, 0, 4, -1);   /* FLUSH (FETH, RETH) */
    set_rc_uc(0x1D, 16, 1, 0, -1);   /* ATOMIC WRITE (RETH) */
    /* netio's Opcode enum has no UC read/atomic/flush opcodes: drop them. */
    static const int uc_invalid[] = {0x2C, 0x2D, 0x2E, 0x2F, 0x30, 0x31, 0x32, 0x33, 0x34,
                                     0x36, 0x37, 0x3C, 0x3D};
    for (size_t i = 0; i < sizeof uc_invalid / sizeof uc_invalid[0]; i++)
        memset(&g_ops[uc_invalid[i]], 0, sizeof(op_layout));
    op_layout ud = {1, 8, 1, -1, -1, 1};
    g_ops[0x64] = ud;                /* UD SEND ONLY (DETH) */
    ud.ext_bytes = 12;
    g_ops[0x65] = ud;                /* UD SEND ONLY with IMM (DETH, ImmDt) */
    op_layout cnp = {1, 16, 0, -1, -1, 0};
    g_ops[0x81] = cnp;               /* RoCEv2 CNP (16 reserved bytes) */
    g_ops_ready = 1;
}

void netio_analyze_opcode_layout(uint8_t opcode, int32_t *out) {
    init_ops();
    const op_layout *l = &g_ops[opcode];
    out[0] = l->valid;
    out[1] = l->ext_bytes;
    out[2] = l->has_payload;
    out[3] = l->reth_off;
    out[4] = l->aeth_off;
    out[5] = l->ud;
}

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

typedef netio_analyze_row row;

/* Returns the row kind; fills r. Mirrors extract_one / decode_frame. */
static inline int classify(const uint8_t *f, size_t cap, int linktype, int verify, row *r) {
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
    const op_layout *lay = &g_ops[b[0]];
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

void netio_analyze_frame(const uint8_t *f, size_t cap, uint32_t orig_len, int linktype,
                         int verify_icrc, netio_analyze_row *r) {
    if (!g_ops_ready) init_ops();
    memset(r, 0, sizeof *r);
    int kind = classify(f, cap, linktype, verify_icrc, r);
    if (kind == K_MALFORMED) memset(r, 0, sizeof *r);
    r->kind = (uint8_t)kind;
    if (cap < orig_len) r->flags |= F_TRUNCATED;
}

void netio_analyze_store(netio_analyze_columns *out, size_t i, const netio_analyze_row *r) {
    out->src_mac[i] = r->src_mac;
    out->dst_mac[i] = r->dst_mac;
    out->src_ip[i] = r->src_ip;
    out->dst_ip[i] = r->dst_ip;
    out->dest_qp[i] = r->dest_qp;
    out->psn[i] = r->psn;
    out->msn[i] = r->msn;
    out->reth_len[i] = r->reth_len;
    out->payload_bytes[i] = r->payload_bytes;
    out->vlan[i] = r->vlan;
    out->kind[i] = r->kind;
    out->flags[i] = r->flags;
    out->pcp[i] = r->pcp;
    out->ecn[i] = r->ecn;
    out->opcode[i] = r->opcode;
    out->syndrome[i] = r->syndrome;
    out->pfc_cev[i] = r->pfc_cev;
    memcpy(out->quanta + 8 * i, r->quanta, sizeof r->quanta);
    memcpy(out->src_ip6 + 16 * i, r->src_ip6, 16);
    memcpy(out->dst_ip6 + 16 * i, r->dst_ip6, 16);
}

void netio_analyze_load(const netio_analyze_columns *cols, size_t i, netio_analyze_row *r) {
    r->src_mac = cols->src_mac[i];
    r->dst_mac = cols->dst_mac[i];
    r->src_ip = cols->src_ip[i];
    r->dst_ip = cols->dst_ip[i];
    r->dest_qp = cols->dest_qp[i];
    r->psn = cols->psn[i];
    r->msn = cols->msn[i];
    r->reth_len = cols->reth_len[i];
    r->payload_bytes = cols->payload_bytes[i];
    r->vlan = cols->vlan[i];
    r->kind = cols->kind[i];
    r->flags = cols->flags[i];
    r->pcp = cols->pcp[i];
    r->ecn = cols->ecn[i];
    r->opcode = cols->opcode[i];
    r->syndrome = cols->syndrome[i];
    r->pfc_cev = cols->pfc_cev[i];
    memcpy(r->quanta, cols->quanta + 8 * i, sizeof r->quanta);
    memcpy(r->src_ip6, cols->src_ip6 + 16 * i, 16);
    memcpy(r->dst_ip6, cols->dst_ip6 + 16 * i, 16);
}

size_t netio_analyze_extract(const uint8_t *buf, size_t buf_len, const int64_t *frame_offset,
                             const uint32_t *caplen, const uint32_t *orig_len,
                             const uint16_t *linktype, size_t n, int verify_icrc,
                             netio_analyze_columns *out) {
    init_ops();
    for (size_t i = 0; i < n; i++) {
        row r;
        size_t off = (size_t)frame_offset[i];
        size_t cap = caplen[i];
        if (off > buf_len || cap > buf_len - off) cap = off > buf_len ? 0 : buf_len - off;
        const uint8_t *f = buf + (off > buf_len ? buf_len : off);
        netio_analyze_frame(f, cap, orig_len[i], linktype[i], verify_icrc, &r);
        netio_analyze_store(out, i, &r);
        out->frame_bytes[i] = orig_len[i];
    }
    return n;
}
