/* A ping-pong of RC SEND ONLY messages on one soft-engine QP in one call
 * (netio/backends/soft/pingpong.py drives it; `netio bench send_lat`).
 *
 * perftest's ib_send_lat, sockperf and the verbs backend's VerbsQp.pingpong
 * measure a round trip as a C loop that posts and busy-polls; this is the soft
 * engine's counterpart, on the engine's own QP state (PSNs, MSN, the owed ACK)
 * lent to it for the call and handed back after. The wire is what the engine
 * sends: SEND ONLY with AckReq built by netio_tx_build, RC ACKs by netio_tx_ack,
 * and a held ACK leaves with the next request in the same sendmmsg (the
 * engine's ACK coalescing). It is an RC requester and responder for this one
 * pattern: ACKs retire sent PSNs (IBTA 9.7.5.1.1), a local ACK timeout resends
 * every unacknowledged PSN (go-back-N, retry_cnt times, 9.7.6.1.3), an RNR NAK
 * resends after the peer's RNR timer (rnr_retry times, 7 for ever), a PSN
 * sequence NAK at once; duplicate requests are ACKed again and not delivered
 * twice (C9-105), a packet past a gap is dropped (the peer resends it). Any
 * other NAK ends the call with an error. Datagrams for other QPs are copied
 * aside for the engine, in arrival order. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "netio_native.h"
#include "softpath_internal.h"

#define OP_SEND_ONLY 0x04u
#define OP_ACKNOWLEDGE 0x11u
#define PSN_MASK 0xFFFFFFu
#define AETH_ACK_NO_CREDITS 0x1F000000u /* syndrome ACK, credit count 31 (invalid) */
#define MAX_OUTSTANDING 32u               /* PSNs a retransmission resends at most */
#define FIRST_RESPONSE_OPCODE 0x0Du       /* RC READ RESPONSE FIRST .. ATOMIC ACK */
#define LAST_RESPONSE_OPCODE 0x12u

static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* a - b in [-2^23, 2^23) (PSN order) */
static int32_t psn_diff(uint32_t a, uint32_t b) {
    return (int32_t)(((a - b + 0x800000u) & PSN_MASK)) - 0x800000;
}

typedef struct {
    uint32_t una;       /* oldest PSN sent and not acknowledged (== sq_psn: none) */
    uint32_t retries;   /* timeouts since the last ACK that advanced una */
    int64_t timer_ns;   /* when the oldest outstanding PSN was (re)sent */
    int64_t resend_ns;  /* after an RNR NAK: when to resend from una (0: none) */
    uint32_t rnr_left;  /* RNR NAKs still allowed (7: for ever) */
    int got;            /* the awaited request arrived */
    int handed_off;     /* a request went to the engine: later ones follow it */
} pp_state;

static void defer(netio_pingpong *pp, const netio_rx_ring *r, uint32_t i) {
    uint32_t len = r->len[i];
    uint32_t need = 12u + ((len + 3u) & ~3u);
    if (r->truncated[i] || pp->defer_cap - pp->defer_len < need) {
        pp->defer_lost++; /* as a full socket buffer would drop it; the sender resends */
        return;
    }
    uint8_t *d = pp->defer_buf + pp->defer_len;
    memcpy(d, &len, 4);
    memcpy(d + 4, &r->src_ip[i], 4);
    memcpy(d + 8, &r->src_port[i], 4);
    memcpy(d + 12, r->buf + r->off[i], len);
    pp->defer_len += need;
    pp->defer_count++;
}

/* Send, in one sendmmsg, the owed ACK (if any) and the SEND ONLY of PSN psn
 * (with_request), or just the ACK. */
static int transmit(netio_pingpong *pp, int with_request, uint32_t psn) {
    uint8_t hdr[2 * NETIO_TX_SLOT_BYTES];
    netio_iov iov[8];
    uint32_t iovstart[2], iovcnt[2];
    netio_tx_batch b;
    memset(&b, 0, sizeof b);
    b.hdr = hdr;
    b.iov = iov;
    b.iovstart = iovstart;
    b.iovcnt = iovcnt;
    b.max_pkts = 2;
    b.max_iov = 8;
    if (with_request) {
        netio_tx_msg m;
        memset(&m, 0, sizeof m);
        m.src_ip = pp->local_ip;
        m.dst_ip = pp->remote_ip;
        m.src_port = pp->src_port;
        m.pkey = pp->pkey;
        m.dest_qp = pp->dest_qp;
        m.mtu = pp->mtu;
        m.npkts = 1;
        m.rc = 1;
        m.op_only = m.op_first = m.op_middle = m.op_last = OP_SEND_ONLY;
        m.length = pp->send_bytes;
        netio_sge sge = {pp->send_buf, pp->send_bytes};
        uint32_t noack = 0;
        int built = netio_tx_build(&m, &sge, 1, 0, psn, 1, &noack, &b);
        if (built < 0)
            return built;
    }
    /* the request first: the peer's answer waits on it, not on the ACK */
    if (pp->ack_owed) {
        if (netio_tx_ack(&b, pp->local_ip, pp->remote_ip, pp->src_port, pp->pkey, pp->dest_qp,
                         (pp->rq_psn - 1u) & PSN_MASK, AETH_ACK_NO_CREDITS | pp->msn) < 0)
            return -ENOBUFS;
    }
    if (b.count == 0)
        return 0;
    int sent = netio_tx_send(pp->tx_fd, pp->remote_ip, &b, 0);
    if (sent < 0 && sent != -EAGAIN && sent != -EWOULDBLOCK && sent != -ENOBUFS)
        return sent; /* a full socket buffer loses the packets: the timers recover */
    if (sent > 0)
        pp->packets_sent += (uint64_t)sent;
    if (pp->ack_owed && sent == (int)b.count)
        pp->ack_owed = 0; /* else the ACK is owed still (or a duplicate asks again) */
    return 0;
}

static int fail(netio_pingpong *pp, uint32_t status, int32_t err) {
    pp->status = status;
    pp->err = err;
    return -1;
}

/* The next request of the ping-pong goes out with PSN sq_psn. */
static int send_request(netio_pingpong *pp, pp_state *st) {
    int rc = transmit(pp, 1, pp->sq_psn);
    if (rc < 0)
        return fail(pp, NETIO_PP_SOCKET, rc);
    if (st->una == pp->sq_psn)
        st->timer_ns = mono_ns(); /* the timer runs for the oldest outstanding PSN */
    pp->sq_psn = (pp->sq_psn + 1u) & PSN_MASK;
    return 0;
}

/* Resend every PSN from una on (go-back-N). */
static int retransmit(netio_pingpong *pp, pp_state *st) {
    uint32_t n = (uint32_t)psn_diff(pp->sq_psn, st->una);
    for (uint32_t k = 0; k < n; k++) {
        int rc = transmit(pp, 1, (st->una + k) & PSN_MASK);
        if (rc < 0)
            return fail(pp, NETIO_PP_SOCKET, rc);
        pp->retransmits++;
    }
    st->timer_ns = mono_ns();
    return 0;
}

/* One received slot: 0 taken or set aside, -1 the call ends (status set). */
static int take(netio_pingpong *pp, pp_state *st, uint32_t i, int want_request) {
    const netio_rx_ring *r = pp->ring;
    const uint8_t *p;
    uint32_t n, src, sport;
    if (netio_sp_slot_payload(r, i, &p, &n, &src, &sport) < 0 || n < 16) {
        defer(pp, r, i);
        return 0;
    }
    uint32_t qpn = be32(p + 4) & PSN_MASK;
    uint32_t pkey = ((uint32_t)p[2] << 8) | p[3];
    if (qpn != pp->qpn || src != pp->remote_ip || pkey != pp->pkey || (p[1] & 0x0Fu) != 0) {
        defer(pp, r, i); /* another QP's, or for the engine to refuse */
        return 0;
    }
    if (pp->verify_icrc && !netio_sp_icrc_ok(r, p, n, src, sport, pp->local_ip)) {
        defer(pp, r, i); /* the engine counts and drops it */
        return 0;
    }
    pp->packets_received++;
    uint32_t op = p[0];
    uint32_t psn = be32(p + 8) & PSN_MASK;
    if (op == OP_ACKNOWLEDGE) {
        if (n != 20u) {
            defer(pp, r, i);
            return 0;
        }
        uint32_t aeth = be32(p + 12);
        uint32_t kind = aeth >> 29, code = (aeth >> 24) & 0x1Fu;
        if (psn_diff(psn, st->una) < 0 || psn_diff(psn, pp->sq_psn) >= 0)
            return 0; /* for PSNs retired already (or never sent): stale */
        if (kind == 0) { /* an ACK retires every PSN up to its own */
            st->una = (psn + 1u) & PSN_MASK;
            st->retries = 0;
            st->timer_ns = mono_ns();
            return 0;
        }
        st->una = psn; /* a NAK acknowledges every PSN before its own */
        if (kind == 1) { /* RNR NAK: wait the peer's timer, then resend from psn (9.7.5.2.8) */
            pp->rnr_naks++;
            if (st->rnr_left == 0) {
                pp->nak_aeth = aeth;
                return fail(pp, NETIO_PP_RNR_RETRY_EXCEEDED, 0);
            }
            if (st->rnr_left != 7u)
                st->rnr_left--;
            st->resend_ns = mono_ns() + pp->rnr_wait_ns[code];
            return 0;
        }
        if (kind == 3 && code == 0) { /* PSN sequence error: go back to psn now */
            if (retransmit(pp, st) < 0)
                return -1;
            return 0;
        }
        pp->nak_aeth = aeth; /* invalid request, access or operational error */
        return fail(pp, NETIO_PP_NAK, 0);
    }
    if (op >= FIRST_RESPONSE_OPCODE && op <= LAST_RESPONSE_OPCODE) {
        defer(pp, r, i); /* a response this loop never asked for */
        return 0;
    }
    int32_t d = psn_diff(psn, pp->rq_psn);
    if (d < 0) { /* a duplicate (our ACK was lost): acknowledge again, do not deliver */
        pp->duplicates++;
        pp->ack_owed = 1;
        int rc = transmit(pp, 0, 0);
        return rc < 0 ? fail(pp, NETIO_PP_SOCKET, rc) : 0;
    }
    if (d > 0 && !st->handed_off) { /* past a gap: the peer resends from the gap */
        pp->dropped++;
        return 0;
    }
    if (!want_request || st->got || st->handed_off || op != OP_SEND_ONLY) {
        st->handed_off = 1; /* the next message of the QP (say, the bench's control):
                             * the engine takes it and every request after it */
        defer(pp, r, i);
        return 0;
    }
    uint32_t pad = (p[1] >> 4) & 3u;
    if (n < 16u + pad)
        return fail(pp, NETIO_PP_MALFORMED, 0);
    uint32_t size = n - 16u - pad;
    if (size > pp->recv_room || size > pp->mtu)
        return fail(pp, NETIO_PP_TOO_LONG, (int32_t)size);
    memcpy(pp->recv_buf, p + 12, size);
    pp->received_bytes = size;
    st->got = 1;
    pp->rq_psn = (pp->rq_psn + 1u) & PSN_MASK;
    pp->msn = (pp->msn + 1u) & PSN_MASK;
    if (p[8] & 0x80u)
        pp->ack_owed = 1;
    return 0;
}

/* Serve the QP until the awaited request arrived (want_request) or every sent
 * PSN is acknowledged (not want_request). */
static int wait_for(netio_pingpong *pp, pp_state *st, int want_request) {
    netio_rx_ring *r = pp->ring;
    int64_t now = mono_ns();
    int64_t heard = now;
    int64_t spin_until = now + pp->spin_ns;
    st->got = 0;
    for (;;) {
        int got = netio_rx_recv(pp->rx_fd, r);
        if (got < 0 && got != -EAGAIN && got != -EWOULDBLOCK && got != -EINTR)
            return fail(pp, NETIO_PP_SOCKET, got);
        now = mono_ns();
        if (got > 0) {
            heard = now;
            spin_until = now + pp->spin_ns;
            for (uint32_t i = 0; i < r->count; i++) {
                if (take(pp, st, i, want_request) < 0) {
                    for (uint32_t j = i + 1; j < r->count; j++)
                        defer(pp, r, j); /* the engine sees what came after */
                    return -1;
                }
            }
        }
        if (want_request ? st->got : st->una == pp->sq_psn)
            return 0;
        if (st->resend_ns != 0) {
            if (now >= st->resend_ns) {
                st->resend_ns = 0;
                if (retransmit(pp, st) < 0)
                    return -1;
            }
        } else if (st->una != pp->sq_psn && pp->ack_timeout_ns > 0 &&
                   now - st->timer_ns >= pp->ack_timeout_ns) {
            if (st->retries >= pp->retry_cnt)
                return fail(pp, NETIO_PP_RETRY_EXCEEDED, 0);
            st->retries++;
            if (psn_diff(pp->sq_psn, st->una) > (int32_t)MAX_OUTSTANDING)
                return fail(pp, NETIO_PP_RETRY_EXCEEDED, 0);
            if (retransmit(pp, st) < 0)
                return -1;
        }
        if (now - heard >= pp->idle_timeout_ns)
            return fail(pp, NETIO_PP_IDLE, 0);
        if (got <= 0 && now >= spin_until) {
            /* sleep until a datagram or the next timer (whole milliseconds) */
            int64_t wake = heard + pp->idle_timeout_ns;
            if (st->resend_ns != 0 && st->resend_ns < wake)
                wake = st->resend_ns;
            else if (st->resend_ns == 0 && st->una != pp->sq_psn && pp->ack_timeout_ns > 0 &&
                     st->timer_ns + pp->ack_timeout_ns < wake)
                wake = st->timer_ns + pp->ack_timeout_ns;
            int64_t ms = (wake - now + 999999) / 1000000;
            struct pollfd f = {pp->rx_fd, POLLIN, 0};
            poll(&f, 1, (int)(ms < 1 ? 1 : ms > 1000 ? 1000 : ms));
        }
    }
}

int netio_pingpong_run(netio_pingpong *pp) {
    pp_state st;
    memset(&st, 0, sizeof st);
    st.una = pp->sq_psn;
    st.rnr_left = pp->rnr_retry;
    pp->done = 0;
    pp->status = NETIO_PP_OK;
    pp->err = 0;
    pp->defer_len = pp->defer_count = pp->defer_lost = 0;
    if (pp->ring == NULL || pp->mtu == 0 || pp->send_bytes > pp->mtu)
        return fail(pp, NETIO_PP_TOO_LONG, (int32_t)pp->send_bytes);
    for (uint32_t k = 0; k < pp->count; k++) {
        if (pp->initiator) {
            int64_t t0 = mono_ns();
            if (send_request(pp, &st) < 0 || wait_for(pp, &st, 1) < 0)
                return -1;
            pp->rtt_ns[k] = mono_ns() - t0;
        } else {
            if (!(k == 0 && pp->answer_first) && wait_for(pp, &st, 1) < 0)
                return -1;
            if (send_request(pp, &st) < 0)
                return -1;
        }
        pp->done = k + 1;
    }
    if (pp->initiator && pp->ack_owed) { /* the last answer's ACK: nothing follows it */
        int rc = transmit(pp, 0, 0);
        if (rc < 0)
            return fail(pp, NETIO_PP_SOCKET, rc);
    }
    if (st.una != pp->sq_psn && wait_for(pp, &st, 0) < 0)
        return -1;
    return 0;
}
