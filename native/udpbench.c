/* The plain UDP peer of bench/bench_soft.py: what two processes reach with
 * sendmmsg/recvmmsg and nothing else (no headers, no ICRC, no placement), the
 * ceiling the soft RoCE path is measured against. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "netio_native.h"

#define BENCH_BATCH 64u

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int64_t netio_udp_blast(int fd, uint32_t dst_ip, uint32_t port, const uint8_t *data,
                        uint32_t size, uint64_t count) {
    struct mmsghdr msgs[BENCH_BATCH];
    struct iovec iov;
    struct sockaddr_in to;
    memset(&to, 0, sizeof to);
    to.sin_family = AF_INET;
    to.sin_port = htons((uint16_t)port);
    to.sin_addr.s_addr = htonl(dst_ip);
    iov.iov_base = (void *)data;
    iov.iov_len = size;
    for (uint32_t i = 0; i < BENCH_BATCH; i++) {
        memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
        msgs[i].msg_hdr.msg_name = &to;
        msgs[i].msg_hdr.msg_namelen = sizeof to;
        msgs[i].msg_hdr.msg_iov = &iov;
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    uint64_t sent = 0;
    while (sent < count) {
        uint64_t left = count - sent;
        unsigned n = left < BENCH_BATCH ? (unsigned)left : BENCH_BATCH;
        int r = sendmmsg(fd, msgs, n, 0);
        if (r < 0) {
            if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN)
                continue;
            return -errno;
        }
        sent += (uint64_t)r;
    }
    return (int64_t)sent;
}

int64_t netio_udp_sink(int fd, uint8_t *buf, uint32_t slot_bytes, uint64_t count,
                       int idle_ms, uint64_t *bytes, uint64_t *first_ns, uint64_t *last_ns) {
    struct mmsghdr msgs[BENCH_BATCH];
    struct iovec iov[BENCH_BATCH];
    uint64_t got = 0;
    *bytes = 0;
    *first_ns = *last_ns = 0;
    for (uint32_t i = 0; i < BENCH_BATCH; i++) {
        iov[i].iov_base = buf + (size_t)i * slot_bytes;
        iov[i].iov_len = slot_bytes;
    }
    while (got < count) {
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, idle_ms);
        if (pr == 0)
            break;
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        for (uint32_t i = 0; i < BENCH_BATCH; i++) {
            memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int r = recvmmsg(fd, msgs, BENCH_BATCH, MSG_DONTWAIT, NULL);
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -errno;
        }
        uint64_t t = now_ns();
        if (got == 0)
            *first_ns = t;
        *last_ns = t;
        for (int i = 0; i < r; i++)
            *bytes += msgs[i].msg_len;
        got += (uint64_t)r;
    }
    return (int64_t)got;
}
