/* Dense flow ids for RoCE packets: (src IP, dst IP, dest QP) -> 0, 1, 2, ...
 * in order of first appearance, kept across chunks (an open-addressing hash
 * table that doubles when half full). Reference: netio.analyze.extract.FlowIndex
 * with a dict. */
#include <stdlib.h>

#include "netio_native.h"

struct netio_flow_table {
    uint32_t *keys;   /* 3 words per slot */
    int32_t *ids;     /* -1: empty */
    size_t cap;       /* power of two */
    size_t len;
    uint32_t *order;  /* keys by id, 3 words each */
    size_t order_cap;
};

static inline size_t hash3(uint32_t a, uint32_t b, uint32_t c) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)b + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
    h ^= ((uint64_t)c + 0x165667B19E3779F9ull) * 0x27D4EB2F165667C5ull;
    return (size_t)(h ^ (h >> 29));
}

static int grow(netio_flow_table *t, size_t cap) {
    uint32_t *keys = malloc(cap * 3 * sizeof(uint32_t));
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!keys || !ids) { free(keys); free(ids); return -1; }
    for (size_t i = 0; i < cap; i++) ids[i] = -1;
    for (size_t id = 0; id < t->len; id++) {
        const uint32_t *k = t->order + 3 * id;
        size_t s = hash3(k[0], k[1], k[2]) & (cap - 1);
        while (ids[s] >= 0) s = (s + 1) & (cap - 1);
        ids[s] = (int32_t)id;
        keys[3 * s] = k[0]; keys[3 * s + 1] = k[1]; keys[3 * s + 2] = k[2];
    }
    free(t->keys); free(t->ids);
    t->keys = keys; t->ids = ids; t->cap = cap;
    return 0;
}

netio_flow_table *netio_flow_table_new(void) {
    netio_flow_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (grow(t, 1024) < 0) { free(t); return NULL; }
    return t;
}

void netio_flow_table_free(netio_flow_table *t) {
    if (!t) return;
    free(t->keys); free(t->ids); free(t->order); free(t);
}

size_t netio_flow_table_len(const netio_flow_table *t) { return t->len; }

void netio_flow_table_keys(const netio_flow_table *t, size_t lo, size_t hi, uint32_t *out) {
    for (size_t i = lo; i < hi && i < t->len; i++) {
        out[3 * (i - lo)] = t->order[3 * i];
        out[3 * (i - lo) + 1] = t->order[3 * i + 1];
        out[3 * (i - lo) + 2] = t->order[3 * i + 2];
    }
}

int netio_flow_ids(netio_flow_table *t, const uint8_t *kind, const uint32_t *src_ip,
                   const uint32_t *dst_ip, const uint32_t *dest_qp, size_t n, int32_t *out) {
    for (size_t i = 0; i < n; i++) {
        if (kind[i] != 1) { out[i] = -1; continue; }
        uint32_t a = src_ip[i], b = dst_ip[i], c = dest_qp[i];
        size_t mask = t->cap - 1;
        size_t s = hash3(a, b, c) & mask;
        for (;;) {
            int32_t id = t->ids[s];
            if (id < 0) break;
            const uint32_t *k = t->keys + 3 * s;
            if (k[0] == a && k[1] == b && k[2] == c) break;
            s = (s + 1) & mask;
        }
        if (t->ids[s] >= 0) { out[i] = t->ids[s]; continue; }
        if (t->len == t->order_cap) {
            size_t nc = t->order_cap ? 2 * t->order_cap : 1024;
            uint32_t *o = realloc(t->order, nc * 3 * sizeof(uint32_t));
            if (!o) return -1;
            t->order = o; t->order_cap = nc;
        }
        uint32_t *o = t->order + 3 * t->len;
        o[0] = a; o[1] = b; o[2] = c;
        int32_t id = (int32_t)t->len++;
        t->ids[s] = id;
        t->keys[3 * s] = a; t->keys[3 * s + 1] = b; t->keys[3 * s + 2] = c;
        out[i] = id;
        if (2 * t->len > t->cap && grow(t, 2 * t->cap) < 0) return -1;
    }
    return 0;
}
