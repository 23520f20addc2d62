/* The soft RoCEv2 data path in C (netio/roce/native_path.py drives it).
 *
 * Transmit: the consecutive packets of one SEND/WRITE message (IBTA vol 1
 * §9.7.1-9.7.2: cut at the path MTU, one PSN each, AckReq on the last packet
 * and after every 64 without one as rxe does) are built as iovecs: a header
 * slot per packet (BTH, RETH on the first packet of a WRITE, ImmDt on the
 * last), the payload straight from the registered memory (no user-space
 * copy), and a trailer slot (pad, ICRC). sendmmsg sends them.
 *
 * Receive: recvmmsg fills a ring of slots; netio_rx_fast_run walks it and
 * places the payload of in-order MIDDLE packets of the message a QP has in
 * progress straight into the registered buffer, checking ICRC, QP, source,
 * P_Key, PSN and length exactly as netio/roce/responder.py does. Anything
 * else stops the run and goes to the Python engine (the reference). */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "netio_native.h"
#include "softpath_internal.h"

#define ICRC_SEED_AFTER_LRH 0xdebb20e3u
#define MAX_PKTS_PER_ACK 64u /* rxe RXE_MAX_PKT_PER_ACK */
#define ROCE_PORT 4791u
#define MAX_BATCH 1024u

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* CRC register after the masked IPv4 (ID 0, DF) and UDP headers the kernel
 * emits for a datagram of udp_len bytes (ICRC, IBTA Annex A17.3.3). */
static uint32_t icrc_ipv4_start(uint32_t src_ip, uint32_t dst_ip, uint32_t src_port,
                                uint32_t dst_port, uint32_t udp_len) {
    uint8_t h[28];
    h[0] = 0x45;
    h[1] = 0xFF; /* TOS masked */
    put16(h + 2, 20 + udp_len);
    put16(h + 4, 0);      /* identification */
    put16(h + 6, 0x4000); /* DF */
    h[8] = 0xFF;          /* TTL masked */
    h[9] = 17;
    h[10] = h[11] = 0xFF; /* checksum masked */
    put32(h + 12, src_ip);
    put32(h + 16, dst_ip);
    put16(h + 20, src_port);
    put16(h + 22, dst_port);
    put16(h + 24, udp_len);
    h[26] = h[27] = 0xFF; /* UDP checksum masked */
    return netio_crc32(~ICRC_SEED_AFTER_LRH, h, sizeof h);
}

/* CRC over a BTH (byte 4 masked) and what follows it in the same buffer. */
static uint32_t icrc_bth_on(uint32_t crc, const uint8_t *bth, size_t len) {
    uint8_t b[12];
    memcpy(b, bth, 12);
    b[4] = 0xFF;
    crc = netio_crc32(crc, b, 12);
    return netio_crc32(crc, bth + 12, len - 12);
}

int netio_tx_build(const netio_tx_msg *m, const netio_sge *sge, uint32_t nsge, uint32_t k0,
                   uint32_t psn0, uint32_t count, uint32_t *noack_pkts, netio_tx_batch *b) {
    static const uint8_t zeros[4] = {0, 0, 0, 0};
    uint32_t base = b->count;
    uint32_t niov = base ? b->iovstart[base - 1] + b->iovcnt[base - 1] : 0;
    uint32_t noack = *noack_pkts;
    uint64_t payload = 0;
    if (count > b->max_pkts - base || m->mtu == 0)
        return -ENOBUFS;
    /* locate the SGE holding the first payload byte */
    uint64_t off = (uint64_t)k0 * m->mtu;
    uint32_t si = 0;
    uint64_t so = off;
    while (si < nsge && so >= sge[si].len) {
        so -= sge[si].len;
        si++;
    }
    for (uint32_t jj = 0; jj < count; jj++) {
        uint32_t j = base + jj;
        uint32_t k = k0 + jj;
        uint32_t psn = (psn0 + jj) & 0xFFFFFFu;
        uint64_t start = (uint64_t)k * m->mtu;
        if (start > m->length || k >= m->npkts)
            return -EINVAL;
        uint64_t rest = m->length - start;
        uint32_t size = (uint32_t)(rest < m->mtu ? rest : m->mtu);
        int last = k == m->npkts - 1;
        uint8_t opcode = m->npkts == 1 ? m->op_only : k == 0 ? m->op_first
                         : last       ? m->op_last
                                      : m->op_middle;
        int ack_req = last || noack >= MAX_PKTS_PER_ACK;
        noack = ack_req ? 0 : noack + 1;
        uint32_t pad = (4u - (size & 3u)) & 3u;
        uint8_t *h = b->hdr + (size_t)j * NETIO_TX_SLOT_BYTES;
        uint8_t *t = h + NETIO_TX_TRAILER_OFFSET;
        size_t hl = 12;
        h[0] = opcode;
        h[1] = (uint8_t)(((last && m->solicited) ? 0x80u : 0u) | (pad << 4));
        put16(h + 2, m->pkey);
        put32(h + 4, m->dest_qp & 0xFFFFFFu);
        put32(h + 8, ((ack_req && m->rc) ? 0x80000000u : 0u) | psn);
        if (m->has_reth && k == 0) {
            put32(h + 12, (uint32_t)(m->va >> 32));
            put32(h + 16, (uint32_t)m->va);
            put32(h + 20, m->rkey);
            put32(h + 24, (uint32_t)m->length);
            hl += 16;
        }
        if (m->has_imm && last) {
            put32(h + hl, m->imm);
            hl += 4;
        }
        uint32_t udp_len = 8 + (uint32_t)hl + size + pad + 4;
        uint32_t crc = icrc_ipv4_start(m->src_ip, m->dst_ip, m->src_port, ROCE_PORT, udp_len);
        crc = icrc_bth_on(crc, h, hl);
        if (niov >= b->max_iov)
            return -ENOBUFS;
        b->iovstart[j] = niov;
        b->iov[niov].base = h;
        b->iov[niov].len = hl;
        niov++;
        uint32_t need = size;
        while (need) {
            if (si >= nsge)
                return -EINVAL;
            uint64_t avail = sge[si].len - so;
            uint32_t take = (uint32_t)(avail < need ? avail : need);
            if (niov >= b->max_iov)
                return -ENOBUFS;
            b->iov[niov].base = (void *)(sge[si].ptr + so);
            b->iov[niov].len = take;
            niov++;
            crc = netio_crc32(crc, sge[si].ptr + so, take);
            need -= take;
            so += take;
            if (so == sge[si].len) {
                si++;
                so = 0;
            }
        }
        crc = netio_crc32(crc, zeros, pad);
        memset(t, 0, pad);
        t[pad] = (uint8_t)crc;
        t[pad + 1] = (uint8_t)(crc >> 8);
        t[pad + 2] = (uint8_t)(crc >> 16);
        t[pad + 3] = (uint8_t)(crc >> 24);
        if (niov >= b->max_iov)
            return -ENOBUFS;
        b->iov[niov].base = t;
        b->iov[niov].len = pad + 4;
        niov++;
        b->iovcnt[j] = niov - b->iovstart[j];
        payload += size;
    }
    b->count = base + count;
    b->payload_bytes += payload;
    *noack_pkts = noack;
    return (int)niov;
}

int netio_tx_append_packet(netio_tx_batch *b, const uint8_t *pkt, uint32_t len) {
    uint32_t j = b->count;
    uint32_t niov = j ? b->iovstart[j - 1] + b->iovcnt[j - 1] : 0;
    if (len > NETIO_TX_SLOT_BYTES)
        return -EINVAL;
    if (j >= b->max_pkts || niov >= b->max_iov)
        return -ENOBUFS;
    uint8_t *h = b->hdr + (size_t)j * NETIO_TX_SLOT_BYTES;
    memcpy(h, pkt, len);
    b->iov[niov].base = h;
    b->iov[niov].len = len;
    b->iovstart[j] = niov;
    b->iovcnt[j] = 1;
    b->count = j + 1;
    return (int)(niov + 1);
}

int netio_tx_ack(netio_tx_batch *b, uint32_t src_ip, uint32_t dst_ip, uint32_t src_port,
                 uint32_t pkey, uint32_t dest_qp, uint32_t psn, uint32_t aeth) {
    uint8_t pkt[20];
    pkt[0] = 0x11; /* RC ACKNOWLEDGE */
    pkt[1] = 0;    /* no SE, no MigReq, no pad, TVer 0 */
    put16(pkt + 2, pkey);
    put32(pkt + 4, dest_qp & 0xFFFFFFu);
    put32(pkt + 8, psn & 0xFFFFFFu); /* AckReq 0 */
    put32(pkt + 12, aeth);
    uint32_t crc = icrc_ipv4_start(src_ip, dst_ip, src_port, ROCE_PORT, 8 + sizeof pkt);
    crc = icrc_bth_on(crc, pkt, 16);
    pkt[16] = (uint8_t)crc;
    pkt[17] = (uint8_t)(crc >> 8);
    pkt[18] = (uint8_t)(crc >> 16);
    pkt[19] = (uint8_t)(crc >> 24);
    return netio_tx_append_packet(b, pkt, sizeof pkt);
}

int netio_tx_send(int fd, uint32_t dst_ip, const netio_tx_batch *b, uint32_t start) {
    struct mmsghdr msgs[64];
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons(ROCE_PORT);
    to.sin_addr.s_addr = htonl(dst_ip);
    uint32_t done = start;
    while (done < b->count) {
        uint32_t n = b->count - done;
        if (n > 64)
            n = 64;
        for (uint32_t i = 0; i < n; i++) {
            struct msghdr *h = &msgs[i].msg_hdr;
            memset(h, 0, sizeof *h);
            h->msg_name = &to;
            h->msg_namelen = sizeof to;
            h->msg_iov = (struct iovec *)(b->iov + b->iovstart[done + i]);
            h->msg_iovlen = b->iovcnt[done + i];
        }
        int r = sendmmsg(fd, msgs, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (done > start)
                return (int)(done - start);
            return -errno;
        }
        done += (uint32_t)r;
        if ((uint32_t)r < n)
            break;
    }
    return (int)(done - start);
}

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103 /* linux/udp.h */
#endif
#define GSO_MAX_SEGS 64u       /* UDP_MAX_SEGMENTS in the kernel */
#define GSO_MAX_BYTES 65507u   /* IPv4 total length 65535 less IP and UDP headers */
#define GSO_MAX_IOV 1024u      /* UIO_MAXIOV */

static uint32_t pkt_len(const netio_tx_batch *b, uint32_t j) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->iovcnt[j]; i++)
        n += (uint32_t)b->iov[b->iovstart[j] + i].len;
    return n;
}

/* Packets j.. that can go as one UDP_SEGMENT send: equal-size packets, then at
 * most one shorter one (the kernel lets only the last segment be shorter). Their
 * iovecs are contiguous in b (netio_tx_build appends them in order). */
static uint32_t gso_group(const netio_tx_batch *b, uint32_t j, uint32_t *seg) {
    uint32_t size = pkt_len(b, j);
    uint32_t n = 1, bytes = size, niov = b->iovcnt[j];
    *seg = size;
    while (j + n < b->count && n < GSO_MAX_SEGS) {
        uint32_t next = pkt_len(b, j + n);
        if (next > size || bytes + next > GSO_MAX_BYTES || niov + b->iovcnt[j + n] > GSO_MAX_IOV)
            break;
        n++;
        bytes += next;
        niov += b->iovcnt[j + n - 1];
        if (next < size)
            break;
    }
    return n;
}

/* The kernel gives the segments of a GSO send IPv4 IDs counting up from the
 * super-packet's (0: unconnected socket, DF), and the ICRC covers the ID (IBTA
 * A17.3.3 masks TOS, TTL and checksum only; rxe checks it so). Packet k of a
 * group must carry the ICRC for ID k: the CRC is linear, so that is the ID-0 ICRC
 * xor the CRC (zero start, no final xor) of the ID bits followed by the bytes
 * after the ID field, here zeros: plen + 18 of them (the rest of the IPv4 and UDP
 * headers, BTH .. pad; ICRC excluded). Per packet length, one value per ID bit. */
static const uint8_t zero_block[4096];
static __thread struct {
    uint32_t plen;
    uint32_t bit[6]; /* IDs below GSO_MAX_SEGS */
} id_cache[4];
static __thread uint32_t id_cache_next;

static uint32_t id_delta(uint32_t plen, uint32_t id) {
    uint32_t e = 0;
    while (e < 4 && id_cache[e].plen != plen)
        e++;
    if (e == 4) {
        e = id_cache_next++ & 3u;
        id_cache[e].plen = plen;
        for (uint32_t bit = 0; bit < 6; bit++) {
            uint8_t v[2] = {(uint8_t)((1u << bit) >> 8), (uint8_t)(1u << bit)};
            uint32_t c = netio_crc32(0xFFFFFFFFu, v, 2);
            for (uint32_t z = plen + 18; z;) {
                uint32_t n = z < sizeof zero_block ? z : (uint32_t)sizeof zero_block;
                c = netio_crc32(c, zero_block, n);
                z -= n;
            }
            id_cache[e].bit[bit] = ~c;
        }
    }
    uint32_t d = 0;
    for (uint32_t bit = 0; bit < 6; bit++)
        if (id & (1u << bit))
            d ^= id_cache[e].bit[bit];
    return d;
}

/* xor the ICRCs of packets j+1 .. j+g-1 with their ID deltas (again: undone). */
static void gso_icrc_ids(const netio_tx_batch *b, uint32_t j, uint32_t g) {
    for (uint32_t k = 1; k < g; k++) {
        const netio_iov *last = &b->iov[b->iovstart[j + k] + b->iovcnt[j + k] - 1];
        uint8_t *ic = (uint8_t *)last->base + last->len - 4; /* header slots: writable */
        uint32_t d = id_delta(pkt_len(b, j + k), k);
        ic[0] ^= (uint8_t)d;
        ic[1] ^= (uint8_t)(d >> 8);
        ic[2] ^= (uint8_t)(d >> 16);
        ic[3] ^= (uint8_t)(d >> 24);
    }
}

int netio_tx_send_gso(int fd, uint32_t dst_ip, const netio_tx_batch *b, uint32_t start) {
    enum { MSGS = 64 };
    struct mmsghdr msgs[MSGS];
    uint32_t pkts[MSGS];
    union {
        char buf[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl[MSGS];
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons(ROCE_PORT);
    to.sin_addr.s_addr = htonl(dst_ip);
    uint32_t done = start;
    while (done < b->count) {
        uint32_t n = 0, j = done;
        while (j < b->count && n < MSGS) {
            uint32_t seg;
            uint32_t g = gso_group(b, j, &seg);
            struct msghdr *h = &msgs[n].msg_hdr;
            memset(h, 0, sizeof *h);
            h->msg_name = &to;
            h->msg_namelen = sizeof to;
            h->msg_iov = (struct iovec *)(b->iov + b->iovstart[j]);
            h->msg_iovlen = b->iovstart[j + g - 1] + b->iovcnt[j + g - 1] - b->iovstart[j];
            if (g > 1) {
                h->msg_control = ctl[n].buf;
                h->msg_controllen = sizeof ctl[n].buf;
                struct cmsghdr *c = CMSG_FIRSTHDR(h);
                c->cmsg_level = SOL_UDP;
                c->cmsg_type = UDP_SEGMENT;
                c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t gso = (uint16_t)seg;
                memcpy(CMSG_DATA(c), &gso, sizeof gso);
            }
            pkts[n++] = g;
            gso_icrc_ids(b, j, g);
            j += g;
        }
        int r = sendmmsg(fd, msgs, n, 0);
        for (uint32_t i = 0, jj = done; i < n; jj += pkts[i++])
            gso_icrc_ids(b, jj, pkts[i]); /* the run keeps its ID-0 packets */
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (done > start)
                return (int)(done - start);
            return -errno;
        }
        for (int i = 0; i < r; i++)
            done += pkts[i];
        if ((uint32_t)r < n)
            break;
    }
    return (int)(done - start);
}

#ifndef UDP_GRO
#define UDP_GRO 104 /* linux/udp.h */
#endif
#define GRO_REGION 65536u
#define GRO_MAX_SEGS 64u /* UDP_GRO_CNT_MAX */

/* UDP_GRO: recvmmsg into 64 KiB regions; each coalesced buffer (its segment size
 * in the UDP_GRO cmsg; none: one datagram) becomes datagrams in place. */
static int rx_recv_gro(int fd, netio_rx_ring *r) {
    enum { MAXM = 64 };
    struct mmsghdr msgs[MAXM];
    struct iovec iov[MAXM];
    struct sockaddr_in from[MAXM];
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl[MAXM];
    uint32_t n = (uint32_t)(((uint64_t)r->nslots * r->slot_bytes) / GRO_REGION);
    if (n > r->max_count / GRO_MAX_SEGS)
        n = r->max_count / GRO_MAX_SEGS;
    if (n > MAXM)
        n = MAXM;
    if (n == 0)
        return -ENOBUFS;
    for (uint32_t i = 0; i < n; i++) {
        iov[i].iov_base = r->buf + (size_t)i * GRO_REGION;
        iov[i].iov_len = GRO_REGION;
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        msgs[i].msg_hdr.msg_control = ctl[i].buf;
        msgs[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
    }
    int got;
    do {
        got = recvmmsg(fd, msgs, n, MSG_DONTWAIT, NULL);
    } while (got < 0 && errno == EINTR);
    r->count = 0;
    r->full = 0;
    if (got < 0)
        return -errno;
    r->full = (uint32_t)got == n;
    uint32_t c = 0;
    for (int i = 0; i < got; i++) {
        struct msghdr *h = &msgs[i].msg_hdr;
        uint32_t len = msgs[i].msg_len;
        uint32_t seg = len;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(h); cm; cm = CMSG_NXTHDR(h, cm)) {
            if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                int v;
                memcpy(&v, CMSG_DATA(cm), sizeof v);
                if (v > 0)
                    seg = (uint32_t)v;
            }
        }
        uint8_t trunc = (h->msg_flags & MSG_TRUNC) != 0;
        if (seg < len)
            r->coalesced++;
        uint32_t off = 0;
        do { /* a zero-length datagram is one entry too */
            uint32_t take = len - off < seg ? len - off : seg;
            if (c >= r->max_count)
                return -ENOBUFS; /* cannot happen: n regions of at most 64 segments */
            r->off[c] = (uint32_t)i * GRO_REGION + off;
            r->len[c] = take;
            r->truncated[c] = trunc;
            r->src_ip[c] = ntohl(from[i].sin_addr.s_addr);
            r->src_port[c] = ntohs(from[i].sin_port);
            c++;
            off += take;
        } while (off < len && seg > 0);
    }
    r->count = c;
    return (int)c;
}

int netio_rx_recv(int fd, netio_rx_ring *r) {
    if (r->gro)
        return rx_recv_gro(fd, r);
    struct mmsghdr msgs[256];
    struct iovec iov[256];
    struct sockaddr_in from[256];
    uint32_t n = r->nslots < 256 ? r->nslots : 256;
    for (uint32_t i = 0; i < n; i++) {
        iov[i].iov_base = r->buf + (size_t)i * r->slot_bytes;
        iov[i].iov_len = r->slot_bytes;
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    }
    int got;
    do {
        got = recvmmsg(fd, msgs, n, MSG_DONTWAIT, NULL);
    } while (got < 0 && errno == EINTR);
    r->count = 0;
    r->full = 0;
    if (got < 0)
        return -errno;
    r->full = (uint32_t)got == n;
    for (int i = 0; i < got; i++) {
        r->off[i] = (uint32_t)i * r->slot_bytes;
        r->len[i] = msgs[i].msg_len;
        r->truncated[i] = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0;
        r->src_ip[i] = ntohl(from[i].sin_addr.s_addr);
        r->src_port[i] = ntohs(from[i].sin_port);
    }
    r->count = (uint32_t)got;
    return got;
}

/* Where the UDP payload of slot i starts and how long it is (raw slots hold a
 * whole IPv4 packet); -1 when the slot is not a plain IPv4/UDP datagram. */
int netio_sp_slot_payload(const netio_rx_ring *r, uint32_t i, const uint8_t **p, uint32_t *n,
                          uint32_t *src_ip, uint32_t *src_port) {
    const uint8_t *s = r->buf + r->off[i];
    uint32_t len = r->len[i];
    if (r->truncated[i])
        return -1;
    if (!r->raw) {
        *p = s;
        *n = len;
        *src_ip = r->src_ip[i];
        *src_port = r->src_port[i];
        return 0;
    }
    if (len < 28 || s[0] != 0x45)
        return -1;
    uint32_t total = ((uint32_t)s[2] << 8) | s[3];
    uint32_t udp_len = ((uint32_t)s[24] << 8) | s[25];
    if (total > len || total < 28 || udp_len != total - 20)
        return -1;
    if ((((uint32_t)s[22] << 8) | s[23]) != ROCE_PORT)
        return -1;
    *p = s + 28;
    *n = total - 28;
    *src_ip = get32(s + 12);
    *src_port = ((uint32_t)s[20] << 8) | s[21];
    return 0;
}

/* The ICRC of a received packet (p: BTH .. ICRC, n bytes) is right. */
int netio_sp_icrc_ok(const netio_rx_ring *r, const uint8_t *p, uint32_t n, uint32_t src,
                     uint32_t sport, uint32_t local_ip) {
    uint32_t crc;
    if (r->raw) {
        int64_t v = netio_icrc(p - 28, 28 + n - 4);
        if (v < 0)
            return 0;
        crc = (uint32_t)v;
    } else {
        crc = icrc_ipv4_start(src, local_ip, sport, ROCE_PORT, 8 + n);
        crc = icrc_bth_on(crc, p, n - 4);
    }
    const uint8_t *ic = p + n - 4;
    uint32_t carried = (uint32_t)ic[0] | ((uint32_t)ic[1] << 8) | ((uint32_t)ic[2] << 16) |
                       ((uint32_t)ic[3] << 24);
    if (crc == carried)
        return 1;
    if (r->raw)
        return 0;
    /* A UDP socket hides the IPv4 ID: a segment of a GSO send (ID k < 64) is right
     * too (the engine's check would accept any ID; this is the common case in C). */
    for (uint32_t k = 1; k < GSO_MAX_SEGS; k++)
        if ((crc ^ carried) == id_delta(n, k))
            return 1;
    return 0;
}

static uint64_t get64(const uint8_t *p) { return ((uint64_t)get32(p) << 32) | get32(p + 4); }

/* RC opcodes (IBTA vol 1 Table 38). */
#define OP_SEND_ONLY 0x04u
#define OP_SEND_ONLY_IMM 0x05u
#define OP_WRITE_ONLY 0x0Au
#define OP_WRITE_ONLY_IMM 0x0Bu
#define OP_ACKNOWLEDGE 0x11u
#define MAX_MESSAGE 0x80000000ull /* 2**31, as netio/roce/verbs.py MAX_MESSAGE_BYTES */

/* An ONLY SEND/WRITE for an idle context: placed and completed (1), or left to
 * the engine (0). Mirrors netio/roce/responder.py _send/_write for an in-order
 * packet that passes every check. */
static int place_only(netio_rx_fast *c, uint32_t ci, const uint8_t *p, uint32_t n,
                      netio_rx_wc *wc, uint32_t max_wc, uint32_t *nwc) {
    uint32_t op = p[0];
    uint32_t hl;
    switch (op) {
    case OP_SEND_ONLY: hl = 12; break;
    case OP_SEND_ONLY_IMM: hl = 16; break;
    case OP_WRITE_ONLY: hl = 28; break;
    case OP_WRITE_ONLY_IMM: hl = 32; break;
    default: return 0;
    }
    uint32_t pad = (p[1] >> 4) & 3u;
    if ((p[1] & 0x0Fu) != 0 || n < hl + pad + 4 || *nwc >= max_wc)
        return 0;
    uint32_t size = n - hl - pad - 4;
    if (size > c->mtu || ((size + pad) & 3u) != 0)
        return 0;
    int has_imm = op == OP_SEND_ONLY_IMM || op == OP_WRITE_ONLY_IMM;
    uint32_t imm = has_imm ? get32(p + hl - 4) : 0;
    netio_rx_wc *w = &wc[*nwc];
    if (op == OP_SEND_ONLY || op == OP_SEND_ONLY_IMM) {
        if (c->recv_used >= c->nrecv || size > c->recv_room[c->recv_used])
            return 0; /* no receive loaded (RNR, SRQ, several SGEs) or too small */
        memcpy((uint8_t *)(uintptr_t)c->recv_addr[c->recv_used], p + hl, size);
        w->kind = has_imm ? 1u : 0u;
        w->byte_len = size;
    } else {
        uint64_t va = get64(p + 12);
        uint32_t rkey = get32(p + 20);
        uint32_t dma = get32(p + 24);
        if (!c->write_ok || rkey != c->wc_rkey || dma != size || dma == 0 || dma > MAX_MESSAGE)
            return 0;
        if (va < c->wc_va || va - c->wc_va > c->wc_len || dma > c->wc_len - (va - c->wc_va))
            return 0;
        if (has_imm && c->recv_used >= c->nrecv)
            return 0;
        memcpy((uint8_t *)(uintptr_t)(c->wc_addr + (va - c->wc_va)), p + hl, size);
        w->kind = 2u;
        w->byte_len = dma;
    }
    if (op != OP_WRITE_ONLY) { /* it consumed the next receive: a completion */
        w->ctx = ci;
        w->recv = c->recv_used;
        w->imm = imm;
        c->recv_used++;
        (*nwc)++;
    }
    c->msn = (c->msn + 1) & 0xFFFFFFu;
    c->placed_bytes += size;
    return 1;
}

int64_t netio_rx_fast_run(netio_rx_ring *r, uint32_t start, uint32_t local_ip, int verify_icrc,
                          netio_rx_fast *ctx, uint32_t nctx, int coalesce, netio_rx_wc *wc,
                          uint32_t max_wc, uint32_t *nwc, uint32_t *ack_ctx) {
    uint32_t i = start;
    *ack_ctx = 0xFFFFFFFFu;
    *nwc = 0;
    for (; i < r->count; i++) {
        const uint8_t *p;
        uint32_t n, src, sport;
        if (netio_sp_slot_payload(r, i, &p, &n, &src, &sport) < 0 || n < 16)
            break;
        uint32_t qpn = get32(p + 4) & 0xFFFFFFu;
        netio_rx_fast *c = NULL;
        for (uint32_t q = 0; q < nctx; q++) {
            if (ctx[q].qpn == qpn &&
                (ctx[q].middle_opcode != 0xFFFFFFFFu || ctx[q].idle || ctx[q].acks)) {
                c = &ctx[q];
                break;
            }
        }
        if (c == NULL || src != c->remote_ip || ((((uint32_t)p[2] << 8) | p[3]) != c->pkey))
            break;
        uint32_t psn = get32(p + 8) & 0xFFFFFFu;
        if (p[0] == OP_ACKNOWLEDGE) {
            /* a plain ACK (no pad, ACK syndrome): the completer's; NAKs go to the engine */
            if (!c->acks || n != 20u || (p[1] & 0x3Fu) != 0 || (p[12] >> 5) != 0 ||
                *nwc >= max_wc)
                break;
            if (verify_icrc && !netio_sp_icrc_ok(r, p, n, src, sport, local_ip))
                break;
            netio_rx_wc *w = &wc[(*nwc)++];
            w->ctx = (uint32_t)(c - ctx);
            w->recv = 0xFFFFFFFFu;
            w->byte_len = 0;
            w->imm = psn;
            w->kind = 3u;
            continue;
        }
        if (psn != c->expected_psn)
            break;
        if (c->middle_opcode != 0xFFFFFFFFu) {
            if (p[0] != c->middle_opcode || (p[1] & 0x30u) != 0)
                break; /* a middle packet carries a full MTU: no pad */
            if (n != 12u + c->mtu + 4u || c->room < c->mtu)
                break;
            if (verify_icrc && !netio_sp_icrc_ok(r, p, n, src, sport, local_ip))
                break; /* the engine decides (drop, or rxe's other IP IDs in UDP mode) */
            memcpy(c->dst, p + 12, c->mtu);
            c->dst += c->mtu;
            c->room -= c->mtu;
            c->received += c->mtu;
            c->placed_bytes += c->mtu;
        } else {
            if (!c->idle)
                break;
            if (verify_icrc && !netio_sp_icrc_ok(r, p, n, src, sport, local_ip))
                break;
            if (!place_only(c, (uint32_t)(c - ctx), p, n, wc, max_wc, nwc))
                break;
        }
        c->expected_psn = (psn + 1) & 0xFFFFFFu;
        c->placed_packets++;
        if (p[8] & 0x80u) { /* AckReq */
            if (coalesce) {
                c->ack_owed = 1;
                c->ack_psn = psn;
                continue;
            }
            *ack_ctx = (uint32_t)(c - ctx); /* the engine sends the ACK now */
            i++;
            break;
        }
    }
    return (int64_t)i;
}
