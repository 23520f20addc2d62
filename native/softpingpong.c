/* A ping-pong of RC SEND messages on one soft-engine QP in one call
 * (netio/backends/soft/pingpong.py drives it; `netio bench send_lat`).
 *
 * perftest's ib_send_lat, sockperf and the verbs backend's VerbsQp.pingpong
 * measure a round trip as a C loop that posts and busy-polls; this is the soft
 * engine's counterpart, on the engine's own QP state (PSNs, MSN, the owed ACK)
 * lent to it for the call and handed back after. The wire is what the engine
 * sends: a message of any size cut at the path MTU by netio_tx_build (AckReq on
 * the last packet and after every 64), RC ACKs by netio_tx_ack, a held ACK
 * after the request in the same sendmmsg. It is an RC requester and responder
 * for this one pattern: at most `window` PSNs unacknowledged, ACKs retire sent
 * PSNs (IBTA 9.7.5.1.1), a local ACK timeout resends from the oldest
 * unacknowledged PSN (go-back-N, retry_cnt times, 9.7.6.1.3), an RNR NAK
 * resends after the peer's RNR timer (rnr_retry times, 7 for ever), a PSN
 * sequence NAK at once. Received packets go in order straight into the receive
 * buffer (FIRST/MIDDLE a full MTU, LAST/ONLY at most one); duplicates are ACKed
 * again and not delivered twice (C9-105); a packet past a gap is dropped and
 * NAKed once per gap (PSN sequence error, as the engine's responder). Any other
 * NAK ends the call with an error. Datagrams for other QPs, and the next
 * message of this one after the last round trip, are copied aside for the
 * engine, in arrival order. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "netio_native.h"
#include "softpath_internal.h"

#define OP_SEND_FIRST 0x00u
#define OP_SEND_MIDDLE 0x01u
#define OP_SEND_LAST 0x02u
#define OP_SEND_ONLY 0x04u
#define OP_ACKNOWLEDGE 0x11u
#define PSN_MASK 0xFFFFFFu
#define AETH_ACK_NO_CREDITS 0x1F000000u /* syndrome ACK, credit count 31 (invalid) */
#define AETH_NAK_PSN_SEQUENCE 0x60000000u
#define AETH_NAK_INVALID_REQUEST 0x61000000u
#define OP_SEND_LAST_IMM 0x03u
#define OP_SEND_ONLY_IMM 0x05u
#define OP_CNP 0x81u /* RoCEv2 congestion notification: the engine drops it too */
#define MAX_MESSAGE_PKTS (1u << 22) /* keeps PSN distances inside a message far from 2^23 */
#define FIRST_RESPONSE_OPCODE 0x0Du /* RC READ RESPONSE FIRST .. ATOMIC ACKNOWLEDGE */
#define LAST_RESPONSE_OPCODE 0x12u
#define RC_LAST_OPCODE 0x1Fu /* the RC opcodes are 0x00-0x1F (IBTA table 38) */
#define TX_PKTS 64u /* packets built and sent per sendmmsg (plus one ACK) */

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
    return (int32_t)((a - b + 0x800000u) & PSN_MASK) - 0x800000;
}

static uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & PSN_MASK; }

typedef struct {
    /* requester: messages of npkts packets each, back to back from base */
    uint32_t npkts;     /* packets per message */
    uint32_t base;      /* first PSN of the oldest message not wholly acknowledged */
    uint32_t una;       /* oldest PSN not acknowledged */
    uint32_t cur;       /* next PSN to (re)send */
    uint32_t sent_hi;   /* one past the highest PSN sent */
    uint32_t end;       /* one past the last PSN of the messages posted (pp->sq_psn) */
    uint32_t noack;     /* packets since the last AckReq (netio_tx_build's counter) */
    uint32_t retries;   /* timeouts since the last ACK that advanced una */
    int64_t timer_ns;   /* when the local ACK timer was last (re)started */
    int64_t resend_ns;  /* after an RNR NAK: when to resend from una (0: none) */
    uint32_t rnr_left;  /* RNR NAKs still allowed (7: for ever) */
    int tx_blocked;     /* the socket took fewer packets than offered */
    /* responder */
    uint64_t rx_off;    /* bytes of the message in progress placed so far */
    int in_msg;         /* a message is in progress (FIRST or MIDDLE taken) */
    int got;            /* the awaited message arrived whole */
    int ack_now;        /* send the owed ACK at the end of this receive batch */
    int nak_sent;       /* a PSN sequence NAK went for the current gap */
    int handed_off;     /* a message went to the engine: what follows goes too */
} pp_state;

static int fail(netio_pingpong *pp, uint32_t status, int32_t err) {
    pp->status = status;
    pp->err = err;
    return -1;
}

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

/* One sendmmsg: the requests the window allows from st->cur (when `requests`),
 * then the owed ACK (or a NAK with aeth_nak != 0). */
static int transmit(netio_pingpong *pp, pp_state *st, int requests, uint32_t aeth_nak) {
    uint8_t hdr[(TX_PKTS + 1) * NETIO_TX_SLOT_BYTES];
    netio_iov iov[3 * TX_PKTS + 2];
    uint32_t iovstart[TX_PKTS + 1], iovcnt[TX_PKTS + 1];
    netio_tx_batch b;
    memset(&b, 0, sizeof b);
    b.hdr = hdr;
    b.iov = iov;
    b.iovstart = iovstart;
    b.iovcnt = iovcnt;
    b.max_pkts = TX_PKTS + 1;
    b.max_iov = 3 * TX_PKTS + 2;
    uint32_t nreq = 0, k = 0, noack0 = st->noack;
    if (requests && st->cur != st->end) {
        int32_t room = (int32_t)pp->window - psn_diff(st->cur, st->una);
        k = (uint32_t)psn_diff(st->cur, st->base) % st->npkts;
        nreq = st->npkts - k;
        if ((int32_t)nreq > room)
            nreq = room > 0 ? (uint32_t)room : 0;
        if (nreq > TX_PKTS)
            nreq = TX_PKTS;
        if (nreq > 0) {
            netio_tx_msg m;
            memset(&m, 0, sizeof m);
            m.src_ip = pp->local_ip;
            m.dst_ip = pp->remote_ip;
            m.src_port = pp->src_port;
            m.pkey = pp->pkey;
            m.dest_qp = pp->dest_qp;
            m.mtu = pp->mtu;
            m.npkts = st->npkts;
            m.rc = 1;
            m.op_first = OP_SEND_FIRST;
            m.op_middle = OP_SEND_MIDDLE;
            m.op_last = OP_SEND_LAST;
            m.op_only = OP_SEND_ONLY;
            m.length = pp->send_bytes;
            netio_sge sge = {pp->send_buf, pp->send_bytes};
            int built = netio_tx_build(&m, &sge, 1, k, st->cur, nreq, &st->noack, &b);
            if (built < 0)
                return built;
        }
    }
    int with_ack = aeth_nak != 0 || pp->ack_owed;
    if (with_ack) { /* after the requests: the peer's answer waits on them, not on this */
        uint32_t psn = aeth_nak ? pp->rq_psn : (pp->rq_psn - 1u) & PSN_MASK;
        uint32_t aeth = aeth_nak ? (aeth_nak | pp->msn) : (AETH_ACK_NO_CREDITS | pp->msn);
        if (netio_tx_ack(&b, pp->local_ip, pp->remote_ip, pp->src_port, pp->pkey, pp->dest_qp,
                         psn, aeth) < 0)
            return -ENOBUFS;
    }
    if (b.count == 0)
        return 0;
    int sent = netio_tx_send(pp->tx_fd, pp->remote_ip, &b, 0);
    if (sent < 0) {
        if (sent != -EAGAIN && sent != -EWOULDBLOCK && sent != -ENOBUFS)
            return sent;
        sent = 0; /* the socket is full: what did not go goes again later */
    }
    pp->packets_sent += (uint64_t)sent;
    uint32_t went = (uint32_t)sent < nreq ? (uint32_t)sent : nreq;
    if (went > 0) {
        if (st->cur == st->una)
            st->timer_ns = mono_ns(); /* the timer runs while a PSN is unacknowledged */
        st->cur = psn_add(st->cur, went);
        if (psn_diff(st->cur, st->sent_hi) > 0)
            st->sent_hi = st->cur;
    }
    st->tx_blocked = (uint32_t)sent < b.count;
    if (went < nreq) { /* the rest is built again from cur: count AckReqs of what went */
        uint32_t n = noack0;
        for (uint32_t i = 0; i < went; i++)
            n = (k + i == st->npkts - 1 || n >= 64u) ? 0 : n + 1;
        st->noack = n;
    }
    if (with_ack && (uint32_t)sent == b.count && !aeth_nak)
        pp->ack_owed = 0;
    return 0;
}

/* Go back to the oldest unacknowledged PSN (9.7.5.2.x go-back-N). */
static void go_back(pp_state *st) {
    st->cur = st->una;
    st->noack = 0;
}

/* An ACK (or NAK) for PSN psn: retire every PSN before it (and it, for an ACK). */
static void retire(netio_pingpong *pp, pp_state *st, uint32_t una) {
    if (una == st->una)
        return; /* nothing new acknowledged: the timer and the retry budgets run on */
    st->una = una;
    if (psn_diff(st->cur, una) < 0)
        st->cur = una;
    while ((uint32_t)psn_diff(st->una, st->base) >= st->npkts && st->base != st->end)
        st->base = psn_add(st->base, st->npkts);
    st->retries = 0; /* progress restores both budgets, as the engine's recovery does */
    st->rnr_left = pp->rnr_retry;
    st->timer_ns = mono_ns();
}

static int take_ack(netio_pingpong *pp, pp_state *st, const uint8_t *p, uint32_t n) {
    uint32_t psn = be32(p + 8) & PSN_MASK;
    uint32_t aeth = be32(p + 12);
    uint32_t kind = aeth >> 29, code = (aeth >> 24) & 0x1Fu;
    if (psn_diff(psn, st->una) < 0 || psn_diff(psn, st->sent_hi) >= 0)
        return 0; /* for PSNs retired already (or never sent): stale */
    if (kind == 0) {
        retire(pp, st, psn_add(psn, 1));
        return 0;
    }
    retire(pp, st, psn); /* a NAK acknowledges every PSN before its own */
    if (kind == 1) { /* RNR NAK: wait the peer's timer, then resend from psn (9.7.5.2.8) */
        if (st->resend_ns != 0)
            return 0; /* paused already: the engine ignores it too */
        pp->rnr_naks++;
        if (st->rnr_left == 0) {
            pp->nak_aeth = aeth;
            return fail(pp, NETIO_PP_RNR_RETRY_EXCEEDED, 0);
        }
        if (st->rnr_left != 7u)
            st->rnr_left--;
        st->resend_ns = mono_ns() + pp->rnr_wait_ns[code];
        go_back(st);
        return 0;
    }
    if (kind == 3 && code == 0) { /* PSN sequence error: resend from psn now */
        go_back(st);
        pp->retransmits++;
        return 0;
    }
    pp->nak_aeth = aeth; /* invalid request, access or operational error */
    return fail(pp, NETIO_PP_NAK, 0);
}

/* Refuse the request at rq_psn as the engine would (NAK invalid request), end the call. */
static int refuse(netio_pingpong *pp, pp_state *st, uint32_t status, int32_t err) {
    int rc = transmit(pp, st, 0, AETH_NAK_INVALID_REQUEST);
    if (rc < 0)
        return fail(pp, NETIO_PP_SOCKET, rc);
    return fail(pp, status, err);
}

static int take_request(netio_pingpong *pp, pp_state *st, const netio_rx_ring *r,
                        uint32_t i, const uint8_t *p, uint32_t n, int want_request) {
    uint32_t op = p[0];
    uint32_t psn = be32(p + 8) & PSN_MASK;
    int32_t d = psn_diff(psn, pp->rq_psn);
    if (op > OP_SEND_ONLY_IMM) {
        /* WRITE, READ, atomics (new or duplicate: the engine replays READs and atomics)
         * are the engine's; the QP's sequence goes on there */
        if (d >= 0)
            st->handed_off = 1;
        defer(pp, r, i);
        return d == 0 && want_request && !st->got && !st->in_msg
                   ? fail(pp, NETIO_PP_UNEXPECTED, (int32_t)op) : 0;
    }
    if (d < 0) { /* a duplicate (an ACK was lost): acknowledge again, do not deliver */
        pp->duplicates++;
        pp->ack_owed = 1;
        st->ack_now = 1;
        return 0;
    }
    if (d > 0 && !st->handed_off) { /* past a gap: NAK it once, the peer goes back */
        pp->dropped++;
        if (!st->nak_sent) {
            st->nak_sent = 1;
            int rc = transmit(pp, st, 0, AETH_NAK_PSN_SEQUENCE);
            if (rc < 0)
                return fail(pp, NETIO_PP_SOCKET, rc);
        }
        return 0;
    }
    int starts = op == OP_SEND_FIRST || op == OP_SEND_ONLY;
    int continues = op == OP_SEND_MIDDLE || op == OP_SEND_LAST;
    if (st->handed_off || (!st->in_msg && (!starts || !want_request || st->got))) {
        st->handed_off = 1; /* the next message of the QP (say, the bench's control):
                             * the engine takes it and everything after it */
        defer(pp, r, i);
        /* in place of the answer this round waits for: it can never come in order now */
        return want_request && !st->got && !st->in_msg
                   ? fail(pp, NETIO_PP_UNEXPECTED, (int32_t)op) : 0;
    }
    if (st->in_msg && op == OP_SEND_LAST_IMM)
        return fail(pp, NETIO_PP_UNEXPECTED, (int32_t)op); /* valid, but not this loop's */
    if (st->in_msg ? !continues : !starts)
        return refuse(pp, st, NETIO_PP_MALFORMED, (int32_t)op);
    uint32_t pad = (p[1] >> 4) & 3u;
    if (n < 16u + pad)
        return refuse(pp, st, NETIO_PP_MALFORMED, (int32_t)op);
    uint32_t size = n - 16u - pad;
    int last = op == OP_SEND_LAST || op == OP_SEND_ONLY;
    if (size > pp->mtu || (!last && (size != pp->mtu || pad != 0)) ||
        (op == OP_SEND_LAST && size == 0)) /* as the engine: a LAST carries a byte at least */
        return refuse(pp, st, NETIO_PP_MALFORMED, (int32_t)op);
    if (st->rx_off + size > pp->recv_room)
        return refuse(pp, st, NETIO_PP_TOO_LONG, (int32_t)(st->rx_off + size));
    memcpy(pp->recv_buf + st->rx_off, p + 12, size);
    st->rx_off += size;
    st->nak_sent = 0;
    pp->rq_psn = psn_add(pp->rq_psn, 1);
    if (last) {
        pp->received_bytes = (uint32_t)st->rx_off;
        st->rx_off = 0;
        st->in_msg = 0;
        st->got = 1;
        pp->msn = psn_add(pp->msn, 1);
    } else {
        st->in_msg = 1;
    }
    if (p[8] & 0x80u) {
        pp->ack_owed = 1;
        if (!last)
            st->ack_now = 1; /* the sender's window waits on it */
    }
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
    uint32_t op = p[0];
    if (op == OP_CNP) {
        pp->dropped++; /* no congestion control here, as in the engine */
        return 1;
    }
    int response = op >= FIRST_RESPONSE_OPCODE && op <= LAST_RESPONSE_OPCODE;
    if (op > RC_LAST_OPCODE || (response && (op != OP_ACKNOWLEDGE || n != 20u))) {
        defer(pp, r, i); /* another transport's, a response this loop never asked for, or
                          * something for the engine to refuse */
        return 0;
    }
    pp->packets_received++;
    int rc = op == OP_ACKNOWLEDGE ? take_ack(pp, st, p, n)
                                  : take_request(pp, st, r, i, p, n, want_request);
    return rc < 0 ? rc : 1;
}

/* Serve the QP until the awaited message arrived whole (want_request) or every
 * sent PSN is acknowledged (not want_request), sending what the window allows. */
static int wait_for(netio_pingpong *pp, pp_state *st, int want_request) {
    netio_rx_ring *r = pp->ring;
    int64_t now = mono_ns();
    int64_t heard = now;
    int64_t spin_until = now + pp->spin_ns;
    st->got = 0;
    for (;;) {
        int rc;
        if (st->cur != st->end && st->resend_ns == 0 &&
            psn_diff(st->cur, st->una) < (int32_t)pp->window) {
            if ((rc = transmit(pp, st, 1, 0)) < 0)
                return fail(pp, NETIO_PP_SOCKET, rc);
        }
        int got = netio_rx_recv(pp->rx_fd, r);
        if (got < 0 && got != -EAGAIN && got != -EWOULDBLOCK && got != -EINTR)
            return fail(pp, NETIO_PP_SOCKET, got);
        now = mono_ns();
        if (got > 0) {
            spin_until = now + pp->spin_ns;
            st->ack_now = 0;
            for (uint32_t i = 0; i < r->count; i++) {
                int taken = take(pp, st, i, want_request);
                if (taken < 0) {
                    for (uint32_t j = i + 1; j < r->count; j++)
                        defer(pp, r, j); /* the engine sees what came after */
                    return -1;
                }
                if (taken > 0)
                    heard = now; /* only the peer's packets keep the call alive */
            }
            if (st->ack_now && pp->ack_owed && (rc = transmit(pp, st, 0, 0)) < 0)
                return fail(pp, NETIO_PP_SOCKET, rc);
        }
        if (want_request ? st->got : st->una == st->end)
            return 0;
        if (st->resend_ns != 0) {
            if (now >= st->resend_ns) {
                st->resend_ns = 0; /* the pump resends from una */
                st->timer_ns = now;
            }
        } else if (st->una != st->sent_hi && pp->ack_timeout_ns > 0 &&
                   now - st->timer_ns >= pp->ack_timeout_ns) {
            if (st->retries >= pp->retry_cnt)
                return fail(pp, NETIO_PP_RETRY_EXCEEDED, 0);
            st->retries++;
            pp->retransmits++;
            go_back(st);
            st->timer_ns = now;
        }
        if (now - heard >= pp->idle_timeout_ns)
            return fail(pp, NETIO_PP_IDLE, 0);
        int can_send = st->cur != st->end && st->resend_ns == 0 &&
                       psn_diff(st->cur, st->una) < (int32_t)pp->window;
        if (got <= 0 && now >= spin_until && (!can_send || st->tx_blocked)) {
            /* sleep until a datagram, room to send or the next timer (whole ms) */
            int64_t wake = heard + pp->idle_timeout_ns;
            if (st->resend_ns != 0 && st->resend_ns < wake)
                wake = st->resend_ns;
            else if (st->resend_ns == 0 && st->una != st->sent_hi && pp->ack_timeout_ns > 0 &&
                     st->timer_ns + pp->ack_timeout_ns < wake)
                wake = st->timer_ns + pp->ack_timeout_ns;
            int64_t ms = (wake - now + 999999) / 1000000;
            struct pollfd f[2] = {{pp->rx_fd, POLLIN, 0}, {pp->tx_fd, POLLOUT, 0}};
            poll(f, can_send ? 2 : 1, (int)(ms < 1 ? 1 : ms > 1000 ? 1000 : ms));
        }
    }
}

/* Post one message: its packets go out as the window allows. */
static void post(netio_pingpong *pp, pp_state *st) {
    st->end = psn_add(st->end, st->npkts);
    pp->sq_psn = st->end;
}

int netio_pingpong_run(netio_pingpong *pp) {
    pp_state st;
    memset(&st, 0, sizeof st);
    pp->done = 0;
    pp->status = NETIO_PP_OK;
    pp->err = 0;
    pp->defer_len = pp->defer_count = pp->defer_lost = 0;
    uint64_t npkts = pp->send_bytes == 0 || pp->mtu == 0
                         ? 1u : ((uint64_t)pp->send_bytes + pp->mtu - 1) / pp->mtu;
    if (pp->ring == NULL || pp->mtu == 0 || pp->window == 0 || pp->window > MAX_MESSAGE_PKTS
        || npkts > MAX_MESSAGE_PKTS)
        return fail(pp, NETIO_PP_INVALID, 0);
    st.npkts = (uint32_t)npkts;
    st.base = st.una = st.cur = st.sent_hi = st.end = pp->sq_psn;
    st.rnr_left = pp->rnr_retry;
    for (uint32_t k = 0; k < pp->count; k++) {
        if (pp->initiator) {
            int64_t t0 = mono_ns();
            post(pp, &st);
            if (wait_for(pp, &st, 1) < 0)
                return -1;
            pp->rtt_ns[k] = mono_ns() - t0;
        } else {
            if (!(k == 0 && pp->answer_first) && wait_for(pp, &st, 1) < 0)
                return -1;
            post(pp, &st);
            int rc = transmit(pp, &st, 1, 0); /* the answer's first packets, at once */
            if (rc < 0)
                return fail(pp, NETIO_PP_SOCKET, rc);
        }
        pp->done = k + 1;
    }
    if (pp->initiator && pp->ack_owed) { /* the last answer's ACK: nothing follows it */
        int rc = transmit(pp, &st, 0, 0);
        if (rc < 0)
            return fail(pp, NETIO_PP_SOCKET, rc);
    }
    if (st.una != st.end && wait_for(pp, &st, 0) < 0)
        return -1;
    return 0;
}
