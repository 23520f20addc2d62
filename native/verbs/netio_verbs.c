/* netio's native verbs data path: see netio_verbs.h. */
#define _GNU_SOURCE
#include "netio_verbs.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* Copy len bytes at addr of this process into out; 0 or an errno (EFAULT when
 * addr is not mapped). process_vm_readv on ourselves never faults. */
static int read_self(uintptr_t addr, void *out, size_t len)
{
    struct iovec local = {out, len};
    struct iovec remote = {(void *)addr, len};
    ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (got < 0)
        return errno;
    return (size_t)got == len ? 0 : EFAULT;
}

int netio_verbs_find_qp(uintptr_t obj_addr, size_t obj_bytes, uint32_t qp_num,
                        uint32_t qp_type, uintptr_t *qp_out, uintptr_t *send_cq_out,
                        uintptr_t *recv_cq_out)
{
    int found = 0;
    size_t words = obj_bytes / sizeof(uintptr_t);
    *qp_out = *send_cq_out = *recv_cq_out = 0;
    for (size_t i = 0; i < words; i++) {
        uintptr_t cand;
        memcpy(&cand, (const char *)obj_addr + i * sizeof(uintptr_t), sizeof cand);
        if (cand == 0 || cand % sizeof(void *) != 0)
            continue;
        struct ibv_qp qp;
        int rc = read_self(cand, &qp, sizeof qp);
        if (rc == ENOSYS || rc == EPERM)
            return -rc; /* no way to read safely: do not guess */
        if (rc != 0 || qp.qp_num != qp_num || (uint32_t)qp.qp_type != qp_type)
            continue;
        if (qp.context == NULL || qp.pd == NULL || qp.send_cq == NULL || qp.recv_cq == NULL)
            continue;
        struct ibv_pd pd;
        struct ibv_cq scq, rcq;
        if (read_self((uintptr_t)qp.pd, &pd, sizeof pd) != 0 || pd.context != qp.context)
            continue;
        if (read_self((uintptr_t)qp.send_cq, &scq, sizeof scq) != 0
            || scq.context != qp.context)
            continue;
        if (read_self((uintptr_t)qp.recv_cq, &rcq, sizeof rcq) != 0
            || rcq.context != qp.context)
            continue;
        if (found > 0 && *qp_out == cand)
            continue; /* the same pointer held twice is one candidate */
        if (found == 0) {
            *qp_out = cand;
            *send_cq_out = (uintptr_t)qp.send_cq;
            *recv_cq_out = (uintptr_t)qp.recv_cq;
        }
        found++;
    }
    return found;
}

/* The lists are built in one allocation: requests, then scatter/gather
 * entries. Below this many requests they live on the stack. */
enum { STACK_WRS = 64, STACK_SGES = 128 };

int netio_verbs_post_send(uintptr_t qp, int n, const uint64_t *wr_id,
                          const uint32_t *opcode, const uint32_t *flags,
                          const uint64_t *remote_addr, const uint32_t *rkey,
                          const uint32_t *imm_be, const uint64_t *compare_add,
                          const uint64_t *swap, const uint32_t *num_sge,
                          const uint64_t *sge_addr, const uint32_t *sge_len,
                          const uint32_t *sge_lkey, int *bad_index)
{
    struct ibv_send_wr stack_wrs[STACK_WRS];
    struct ibv_sge stack_sges[STACK_SGES];
    struct ibv_send_wr *wrs = stack_wrs;
    struct ibv_sge *sges = stack_sges;
    size_t total_sge = 0;
    *bad_index = 0;
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        total_sge += num_sge[i];
    void *heap = NULL;
    if (n > STACK_WRS || total_sge > STACK_SGES) {
        heap = malloc(n * sizeof *wrs + (total_sge ? total_sge : 1) * sizeof *sges);
        if (heap == NULL)
            return ENOMEM;
        wrs = heap;
        sges = (struct ibv_sge *)(wrs + n);
    }
    size_t s = 0;
    for (int i = 0; i < n; i++) {
        struct ibv_send_wr *wr = &wrs[i];
        memset(wr, 0, sizeof *wr);
        wr->wr_id = wr_id[i];
        wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
        wr->sg_list = num_sge[i] ? &sges[s] : NULL;
        wr->num_sge = (int)num_sge[i];
        for (uint32_t k = 0; k < num_sge[i]; k++, s++) {
            sges[s].addr = sge_addr[s];
            sges[s].length = sge_len[s];
            sges[s].lkey = sge_lkey[s];
        }
        wr->opcode = (enum ibv_wr_opcode)opcode[i];
        wr->send_flags = flags[i];
        wr->imm_data = imm_be[i];
        switch (wr->opcode) {
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            wr->wr.atomic.remote_addr = remote_addr[i];
            wr->wr.atomic.rkey = rkey[i];
            wr->wr.atomic.compare_add = compare_add[i];
            wr->wr.atomic.swap = swap[i];
            break;
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_RDMA_READ:
            wr->wr.rdma.remote_addr = remote_addr[i];
            wr->wr.rdma.rkey = rkey[i];
            break;
        default:
            break;
        }
    }
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send((struct ibv_qp *)qp, wrs, &bad);
    if (rc != 0)
        *bad_index = bad ? (int)(bad - wrs) : 0;
    free(heap);
    return rc;
}

int netio_verbs_post_recv(uintptr_t qp, int n, const uint64_t *wr_id,
                          const uint32_t *num_sge, const uint64_t *sge_addr,
                          const uint32_t *sge_len, const uint32_t *sge_lkey,
                          int *bad_index)
{
    struct ibv_recv_wr stack_wrs[STACK_WRS];
    struct ibv_sge stack_sges[STACK_SGES];
    struct ibv_recv_wr *wrs = stack_wrs;
    struct ibv_sge *sges = stack_sges;
    size_t total_sge = 0;
    *bad_index = 0;
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        total_sge += num_sge[i];
    void *heap = NULL;
    if (n > STACK_WRS || total_sge > STACK_SGES) {
        heap = malloc(n * sizeof *wrs + (total_sge ? total_sge : 1) * sizeof *sges);
        if (heap == NULL)
            return ENOMEM;
        wrs = heap;
        sges = (struct ibv_sge *)(wrs + n);
    }
    size_t s = 0;
    for (int i = 0; i < n; i++) {
        wrs[i].wr_id = wr_id[i];
        wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
        wrs[i].sg_list = num_sge[i] ? &sges[s] : NULL;
        wrs[i].num_sge = (int)num_sge[i];
        for (uint32_t k = 0; k < num_sge[i]; k++, s++) {
            sges[s].addr = sge_addr[s];
            sges[s].length = sge_len[s];
            sges[s].lkey = sge_lkey[s];
        }
    }
    struct ibv_recv_wr *bad = NULL;
    int rc = ibv_post_recv((struct ibv_qp *)qp, wrs, &bad);
    if (rc != 0)
        *bad_index = bad ? (int)(bad - wrs) : 0;
    free(heap);
    return rc;
}

enum { POLL_CHUNK = 64 };

int netio_verbs_poll_cq(uintptr_t cq, int max, uint64_t *wr_id, uint32_t *status,
                        uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                        uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags)
{
    struct ibv_wc wc[POLL_CHUNK];
    int done = 0;
    while (done < max) {
        int want = max - done < POLL_CHUNK ? max - done : POLL_CHUNK;
        int got = ibv_poll_cq((struct ibv_cq *)cq, want, wc);
        if (got < 0)
            return done ? done : -1;
        for (int i = 0; i < got; i++, done++) {
            wr_id[done] = wc[i].wr_id;
            status[done] = wc[i].status;
            opcode[done] = wc[i].opcode;
            byte_len[done] = wc[i].byte_len;
            imm_be[done] = wc[i].imm_data;
            qp_num[done] = wc[i].qp_num;
            src_qp[done] = wc[i].src_qp;
            wc_flags[done] = wc[i].wc_flags;
        }
        if (got < want)
            break;
    }
    return done;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Copy got completions of wc into the flat arrays at index at. */
static void copy_wc(const struct ibv_wc *wc, int got, int at, uint64_t *wr_id,
                    uint32_t *status, uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                    uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags)
{
    for (int i = 0; i < got; i++) {
        wr_id[at + i] = wc[i].wr_id;
        status[at + i] = wc[i].status;
        opcode[at + i] = wc[i].opcode;
        byte_len[at + i] = wc[i].byte_len;
        imm_be[at + i] = wc[i].imm_data;
        qp_num[at + i] = wc[i].qp_num;
        src_qp[at + i] = wc[i].src_qp;
        wc_flags[at + i] = wc[i].wc_flags;
    }
}

/* The clock (and the descriptors) are read once per this many rounds over the CQs:
 * an empty ibv_poll_cq reads one queue index, far cheaper than a system call. */
enum { SPIN_CLOCK_EVERY = 32, SPIN_MAX_FDS = 64 };

int netio_verbs_spin_cq(const uintptr_t *cqs, int n_cq, const int *fds, int n_fd,
                        int64_t spin_ns, int max,
                        int *which, uint64_t *wr_id, uint32_t *status, uint32_t *opcode,
                        uint32_t *byte_len, uint32_t *imm_be, uint32_t *qp_num,
                        uint32_t *src_qp, uint32_t *wc_flags)
{
    struct ibv_wc wc[POLL_CHUNK];
    struct pollfd pfd[SPIN_MAX_FDS];
    int want = max < POLL_CHUNK ? max : POLL_CHUNK;
    int64_t deadline = now_ns() + spin_ns;
    *which = 0;
    if (n_cq <= 0 || want <= 0)
        return 0;
    if (n_fd > SPIN_MAX_FDS)
        n_fd = SPIN_MAX_FDS;
    for (int i = 0; i < n_fd; i++) {
        pfd[i].fd = fds[i];
        pfd[i].events = POLLIN;
        pfd[i].revents = 0;
    }
    for (unsigned round = 0;; round++) {
        for (int c = 0; c < n_cq; c++) {
            int got = ibv_poll_cq((struct ibv_cq *)cqs[c], want, wc);
            if (got == 0)
                continue;
            *which = c;
            if (got < 0)
                return -1;
            copy_wc(wc, got, 0, wr_id, status, opcode, byte_len, imm_be, qp_num, src_qp,
                    wc_flags);
            return got;
        }
        if (round % SPIN_CLOCK_EVERY == 0) {
            if (now_ns() >= deadline)
                return 0;
            if (n_fd > 0 && poll(pfd, (nfds_t)n_fd, 0) > 0)
                return 0;
        }
    }
}

int netio_verbs_post_poll(uintptr_t qp, uintptr_t cq, int n_recv, const uint64_t *recv_wr_id,
                          const uint32_t *recv_num_sge, const uint64_t *recv_sge_addr,
                          const uint32_t *recv_sge_len, const uint32_t *recv_sge_lkey,
                          int n_send, const uint64_t *wr_id_in, const uint32_t *opcode_in,
                          const uint32_t *flags, const uint64_t *remote_addr,
                          const uint32_t *rkey, const uint32_t *imm_in,
                          const uint64_t *compare_add, const uint64_t *swap,
                          const uint32_t *num_sge, const uint64_t *sge_addr,
                          const uint32_t *sge_len, const uint32_t *sge_lkey,
                          uint64_t want_wr_id, int64_t spin_ns, int max, int *post_rc,
                          int *post_which, int *bad_index, uint64_t *wr_id,
                          uint32_t *status, uint32_t *opcode, uint32_t *byte_len,
                          uint32_t *imm_be, uint32_t *qp_num, uint32_t *src_qp,
                          uint32_t *wc_flags)
{
    *post_rc = *post_which = *bad_index = 0;
    if (n_recv > 0) {
        int rc = netio_verbs_post_recv(qp, n_recv, recv_wr_id, recv_num_sge, recv_sge_addr,
                                       recv_sge_len, recv_sge_lkey, bad_index);
        if (rc != 0) {
            *post_rc = rc;
            *post_which = 1;
            return -2;
        }
    }
    if (n_send > 0) {
        int rc = netio_verbs_post_send(qp, n_send, wr_id_in, opcode_in, flags, remote_addr,
                                       rkey, imm_in, compare_add, swap, num_sge, sge_addr,
                                       sge_len, sge_lkey, bad_index);
        if (rc != 0) {
            *post_rc = rc;
            *post_which = 2;
            return -2;
        }
    }
    if (want_wr_id == 0)
        return 0;
    struct ibv_wc wc[POLL_CHUNK];
    int done = 0;
    int64_t deadline = now_ns() + spin_ns;
    for (unsigned round = 0; done < max; round++) {
        int room = max - done < POLL_CHUNK ? max - done : POLL_CHUNK;
        int got = ibv_poll_cq((struct ibv_cq *)cq, room, wc);
        if (got < 0)
            return done ? done : -1;
        if (got > 0) {
            copy_wc(wc, got, done, wr_id, status, opcode, byte_len, imm_be, qp_num, src_qp,
                    wc_flags);
            done += got;
            for (int i = 0; i < got; i++)
                if (wc[i].wr_id == want_wr_id || wc[i].status != IBV_WC_SUCCESS)
                    return done;
        } else if (round % SPIN_CLOCK_EVERY == 0 && now_ns() >= deadline) {
            break;
        }
    }
    return done;
}

/* Poll until a completion of want arrives; completions of other wr_ids that are ours
 * (send_wr_id, last_wr_id, recv_wr_id) are counted in *seen_last / ignored. Returns 0,
 * -1 (poll failed), -3 (time ran out) or 1 (bad completion, copied to index 0). */
static int wait_for(struct ibv_cq *cq, uint64_t want, uint64_t recv_id, uint64_t send_id,
                    uint64_t last_id, int *seen_last, int64_t spin_ns, uint64_t *wr_id,
                    uint32_t *status, uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                    uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags)
{
    struct ibv_wc wc[8];
    int64_t deadline = now_ns() + spin_ns;
    for (unsigned round = 0;; round++) {
        int got = ibv_poll_cq(cq, 8, wc);
        if (got < 0)
            return -1;
        int found = 0;
        for (int i = 0; i < got; i++) {
            uint64_t id = wc[i].wr_id;
            if (wc[i].status != IBV_WC_SUCCESS
                || (id != recv_id && id != send_id && id != last_id)) {
                copy_wc(&wc[i], 1, 0, wr_id, status, opcode, byte_len, imm_be, qp_num,
                        src_qp, wc_flags);
                return 1;
            }
            if (id == last_id)
                *seen_last = 1;
            if (id == want)
                found = 1;
        }
        if (found)
            return 0;
        if (got == 0 && round % SPIN_CLOCK_EVERY == 0 && now_ns() >= deadline)
            return -3;
    }
}

int netio_verbs_pingpong(uintptr_t qp, uintptr_t cq, int initiator, int first, int count,
                         int signal_every, uint64_t recv_wr_id, uint64_t recv_sge_addr,
                         uint32_t recv_sge_len, uint32_t recv_sge_lkey, uint64_t send_wr_id,
                         uint64_t last_wr_id, uint32_t send_opcode, uint32_t send_flags,
                         uint64_t send_sge_addr, uint32_t send_sge_len,
                         uint32_t send_sge_lkey, int64_t spin_ns, int64_t *t_ns,
                         int *steps, int *post_rc, uint64_t *wr_id, uint32_t *status,
                         uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                         uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags)
{
    struct ibv_qp *q = (struct ibv_qp *)qp;
    struct ibv_cq *c = (struct ibv_cq *)cq;
    struct ibv_sge rsge = {recv_sge_addr, recv_sge_len, recv_sge_lkey};
    struct ibv_sge ssge = {send_sge_addr, send_sge_len, send_sge_lkey};
    struct ibv_recv_wr rwr = {.wr_id = recv_wr_id, .sg_list = &rsge, .num_sge = 1};
    struct ibv_send_wr swr;
    struct ibv_recv_wr *rbad = NULL;
    struct ibv_send_wr *sbad = NULL;
    int seen_last = 0, rc;
    memset(&swr, 0, sizeof swr);
    swr.sg_list = &ssge;
    swr.num_sge = 1;
    swr.opcode = (enum ibv_wr_opcode)send_opcode;
    *steps = 0;
    *post_rc = 0;
    if (count <= 0)
        return 0;
    if (signal_every <= 0)
        signal_every = 1;
#define WAIT(want) wait_for(c, (want), recv_wr_id, send_wr_id, last_wr_id, &seen_last, \
                            spin_ns, wr_id, status, opcode, byte_len, imm_be, qp_num, \
                            src_qp, wc_flags)
    if (!initiator && first == 0 && (rc = ibv_post_recv(q, &rwr, &rbad)) != 0) {
        *post_rc = rc;
        return -2;
    }
    if (!initiator && first < 2 && (rc = WAIT(recv_wr_id)) != 0)
        return rc;
    for (int i = 0; i < count; i++) {
        int last = i + 1 == count;
        int64_t t0 = now_ns();
        /* the initiator's receive is for this answer; the other side's for the next ping */
        if (initiator || !last) {
            if ((rc = ibv_post_recv(q, &rwr, &rbad)) != 0) {
                *post_rc = rc;
                return -2;
            }
        }
        swr.wr_id = last ? last_wr_id : send_wr_id;
        swr.send_flags = (send_flags & ~(unsigned)IBV_SEND_SIGNALED)
                         | (last || i % signal_every == 0 ? IBV_SEND_SIGNALED : 0);
        if ((rc = ibv_post_send(q, &swr, &sbad)) != 0) {
            *post_rc = rc;
            return -2;
        }
        if (initiator || !last) {
            if ((rc = WAIT(recv_wr_id)) != 0)
                return rc;
        }
        if (initiator)
            t_ns[i] = now_ns() - t0;
        *steps = i + 1;
    }
    if (!seen_last && (rc = WAIT(last_wr_id)) != 0)
        return rc;
#undef WAIT
    return 0;
}

size_t netio_verbs_abi(int what)
{
    switch (what) {
    case 0:
        return sizeof(struct ibv_send_wr);
    case 1:
        return sizeof(struct ibv_wc);
    case 2:
        return offsetof(struct ibv_qp, qp_num);
    default:
        return 0;
    }
}
