/* Reading sysfs counter files through kept descriptors, many per call.
 *
 * A sysfs attribute regenerates its text on every read from offset 0, so a
 * poll of a device's counters is one pread per kept descriptor.  Done from
 * Python that is a call, a bytes object and an int() per file; here it is the
 * system call alone.  Python side: netio/telemetry/sysfs.py (CounterReader,
 * whose read_counters_py is the reference this must agree with). */
#include <errno.h>
#include <unistd.h>

#include "netio_native.h"

/* Bytes read per file: a 64-bit counter is at most 20 digits and a newline.
 * A read that fills the buffer may hold more, so it is not taken as a number. */
#define COUNTER_BYTES 32

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* 1 and *out set when buf[0..len) is ASCII whitespace, 1 to 20 decimal
 * digits whose value fits in 64 bits, and whitespace; else 0. */
static int parse_plain_u64(const char *buf, size_t len, uint64_t *out) {
    size_t i = 0;
    uint64_t v = 0;
    while (i < len && is_space(buf[i]))
        i++;
    size_t start = i;
    while (i < len && buf[i] >= '0' && buf[i] <= '9') {
        uint64_t d = (uint64_t)(buf[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0; /* past 2^64 - 1: Python's int() reads it, not this */
        v = v * 10 + d;
        i++;
    }
    if (i == start)
        return 0;
    while (i < len && is_space(buf[i]))
        i++;
    if (i != len)
        return 0;
    *out = v;
    return 1;
}

size_t netio_sysfs_read_counters(const int *fds, size_t n, uint64_t *values, int32_t *status) {
    size_t bad = 0;
    char buf[COUNTER_BYTES];
    for (size_t i = 0; i < n; i++) {
        ssize_t got;
        do {
            got = pread(fds[i], buf, sizeof buf, 0);
        } while (got < 0 && errno == EINTR);
        values[i] = 0;
        if (got < 0) {
            status[i] = errno > 0 ? errno : EIO;
            bad++;
        } else if ((size_t)got < sizeof buf && parse_plain_u64(buf, (size_t)got, &values[i])) {
            status[i] = 0;
        } else {
            status[i] = -1;
            bad++;
        }
    }
    return bad;
}
