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

#include "analyze_classify.h"

op_layout netio_analyze_ops[256];
int netio_analyze_ops_ready;

static void set_rc_uc(int low, int ext, int payload, int reth, int aeth) {
    op_layout l = {1, (int8_t)ext, (int8_t)payload, (int8_t)reth, (int8_t)aeth, 0};
    netio_analyze_ops[low] = l;
    netio_analyze_ops[0x20 | low] = l;
}

void netio_analyze_init_ops(void) {
    if (netio_analyze_ops_ready)
        return;
    memset(netio_analyze_ops, 0, sizeof netio_analyze_ops);
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
        memset(&netio_analyze_ops[uc_invalid[i]], 0, sizeof(op_layout));
    op_layout ud = {1, 8, 1, -1, -1, 1};
    netio_analyze_ops[0x64] = ud;                /* UD SEND ONLY (DETH) */
    ud.ext_bytes = 12;
    netio_analyze_ops[0x65] = ud;                /* UD SEND ONLY with IMM (DETH, ImmDt) */
    op_layout cnp = {1, 16, 0, -1, -1, 0};
    netio_analyze_ops[0x81] = cnp;               /* RoCEv2 CNP (16 reserved bytes) */
    netio_analyze_ops_ready = 1;
}

void netio_analyze_opcode_layout(uint8_t opcode, int32_t *out) {
    netio_analyze_init_ops();
    const op_layout *l = &netio_analyze_ops[opcode];
    out[0] = l->valid;
    out[1] = l->ext_bytes;
    out[2] = l->has_payload;
    out[3] = l->reth_off;
    out[4] = l->aeth_off;
    out[5] = l->ud;
}

void netio_analyze_frame(const uint8_t *f, size_t cap, uint32_t orig_len, int linktype,
                         int verify_icrc, netio_analyze_row *r) {
    analyze_frame(f, cap, orig_len, linktype, verify_icrc, r);
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
    netio_analyze_init_ops();
    for (size_t i = 0; i < n; i++) {
        netio_analyze_row r;
        size_t off = (size_t)frame_offset[i];
        size_t cap = caplen[i];
        if (off > buf_len || cap > buf_len - off) cap = off > buf_len ? 0 : buf_len - off;
        const uint8_t *f = buf + (off > buf_len ? buf_len : off);
        analyze_frame(f, cap, orig_len[i], linktype[i], verify_icrc, &r);
        netio_analyze_store(out, i, &r);
        out->frame_bytes[i] = orig_len[i];
    }
    return n;
}
