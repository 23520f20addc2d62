/* Capture analysis: one pass over the scanned records of a chunk.
 *
 * netio_analyzer_feed classifies each record (analyze_extract.c), applies the
 * filters, counts kinds, hands PFC/PAUSE frames back as columns (the pause
 * analysis is per queue and cheap, it stays in Python) and runs every
 * per-packet RoCE analysis on compact per-flow state: counters, the request
 * PSN state machine (24-bit unwrapping, gaps, duplicates, out-of-order
 * fills), the READ-response PSN stream, message/goodput counts, pairing of a
 * flow with its reverse direction, NAK/RNR, ACK and READ latency matching,
 * CE-to-CNP reaction and DCQCN spacing, and per-interval data bytes.
 *
 * The reference is netio.analyze.flows.FlowReference, a plain sequential
 * Python statement of the same rules (its docstring is the specification);
 * tests/test_analyze_flows.py proves that both give identical results.
 * Memory is O(flows): every per-flow list (open PSN gaps, requests awaiting
 * an ACK or a READ response, latency sketches) is bounded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "analyze_classify.h"

#define PSN_MASK 0xFFFFFFll
#define PSN_HALF 0x800000ll

static inline int64_t psn_delta(uint32_t a, uint32_t b) {
    return (((int64_t)a - (int64_t)b + PSN_HALF) & PSN_MASK) - PSN_HALF;
}

/* ------------------------------------------------------------------ keys */

/* w[0] = dest QP | IPv6 << 32; IPv4: w[1] = src, w[3] = dst; IPv6: w[1..2]
 * src (high, low 64 bits), w[3..4] dst. Host pairs use the same layout with
 * the QP zero. */
typedef struct {
    uint64_t w[5];
} fkey;

static inline uint64_t be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline void row_key(const netio_analyze_row *r, fkey *k) {
    if (r->flags & F_IPV6) {
        k->w[0] = (uint64_t)r->dest_qp | (1ull << 32);
        k->w[1] = be64(r->src_ip6);
        k->w[2] = be64(r->src_ip6 + 8);
        k->w[3] = be64(r->dst_ip6);
        k->w[4] = be64(r->dst_ip6 + 8);
    } else {
        k->w[0] = r->dest_qp;
        k->w[1] = r->src_ip;
        k->w[2] = 0;
        k->w[3] = r->dst_ip;
        k->w[4] = 0;
    }
}

static inline uint64_t key_hash(const fkey *k) {
    uint64_t h = k->w[0] * 0x9E3779B97F4A7C15ull;
    h ^= k->w[1] * 0xC2B2AE3D27D4EB4Full;
    h ^= k->w[2] * 0x165667B19E3779F9ull;
    h ^= k->w[3] * 0x27D4EB2F165667C5ull;
    h ^= k->w[4] * 0x94D049BB133111EBull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

static inline int key_eq(const fkey *a, const fkey *b) {
    return a->w[0] == b->w[0] && a->w[1] == b->w[1] && a->w[3] == b->w[3] &&
           a->w[2] == b->w[2] && a->w[4] == b->w[4];
}

/* Open addressing (linear probing), doubled when half full; each slot holds
 * an id and the hash's high bits so most mismatches skip the key compare. */
typedef struct {
    uint32_t id; /* UINT32_MAX: empty */
    uint32_t tag;
} slot_t;

typedef struct {
    slot_t *slots;
    size_t mask;
    fkey *keys; /* by id */
    size_t len, keys_cap;
} ktable;

static int kt_rehash(ktable *t, size_t cap) {
    slot_t *s = malloc(cap * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i].id = UINT32_MAX;
    for (size_t id = 0; id < t->len; id++) {
        uint64_t h = key_hash(&t->keys[id]);
        size_t j = h & (cap - 1);
        while (s[j].id != UINT32_MAX) j = (j + 1) & (cap - 1);
        s[j].id = (uint32_t)id;
        s[j].tag = (uint32_t)(h >> 32);
    }
    free(t->slots);
    t->slots = s;
    t->mask = cap - 1;
    return 0;
}

static int kt_init(ktable *t) {
    memset(t, 0, sizeof *t);
    return kt_rehash(t, 1024);
}

static void kt_free(ktable *t) {
    free(t->slots);
    free(t->keys);
}

/* Id of k; -1 if absent and add is 0; -2 when out of memory. *added = 1 for a new key. */
static inline int64_t kt_find(ktable *t, const fkey *k, int add, int *added) {
    uint64_t h = key_hash(k);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t j = h & t->mask;
    for (;;) {
        slot_t s = t->slots[j];
        if (s.id == UINT32_MAX) break;
        if (s.tag == tag && key_eq(&t->keys[s.id], k)) return s.id;
        j = (j + 1) & t->mask;
    }
    if (!add) return -1;
    if (t->len == t->keys_cap) {
        size_t nc = t->keys_cap ? 2 * t->keys_cap : 1024;
        fkey *nk = realloc(t->keys, nc * sizeof *nk);
        if (!nk) return -2;
        t->keys = nk;
        t->keys_cap = nc;
    }
    uint32_t id = (uint32_t)t->len++;
    t->keys[id] = *k;
    t->slots[j].id = id;
    t->slots[j].tag = tag;
    if (2 * t->len > t->mask + 1 && kt_rehash(t, 2 * (t->mask + 1)) < 0) return -2;
    *added = 1;
    return id;
}

/* -------------------------------------------------------- FlowIndex table */

struct netio_flow_table {
    ktable kt;
};

netio_flow_table *netio_flow_table_new(void) {
    netio_flow_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (kt_init(&t->kt) < 0) { free(t); return NULL; }
    return t;
}

void netio_flow_table_free(netio_flow_table *t) {
    if (!t) return;
    kt_free(&t->kt);
    free(t);
}

size_t netio_flow_table_len(const netio_flow_table *t) { return t->kt.len; }

void netio_flow_table_keys(const netio_flow_table *t, size_t lo, size_t hi, uint64_t *out) {
    for (size_t i = lo; i < hi && i < t->kt.len; i++)
        memcpy(out + 5 * (i - lo), t->kt.keys[i].w, sizeof(fkey));
}

int netio_flow_ids(netio_flow_table *t, const netio_analyze_columns *cols, size_t n,
                   int32_t *out) {
    for (size_t i = 0; i < n; i++) {
        if (cols->kind[i] != K_ROCE) { out[i] = -1; continue; }
        netio_analyze_row r;
        netio_analyze_load(cols, i, &r);
        fkey k;
        row_key(&r, &k);
        int added = 0;
        int64_t id = kt_find(&t->kt, &k, 1, &added);
        if (id < 0) return -1;
        out[i] = (int32_t)id;
    }
    return 0;
}

/* ------------------------------------------------------- bounded lists */

/* A list of (a, b) int64 pairs stored from v[2*start]; grows by doubling. */
typedef struct {
    int64_t *v;
    uint32_t start, len, cap;
} pairs_t;

static inline int64_t *pr_at(pairs_t *p, uint32_t i) { return p->v + 2 * (size_t)(p->start + i); }

static int pr_room(pairs_t *p) {
    if (p->start + p->len < p->cap) return 0;
    if (p->start > 0) {
        memmove(p->v, p->v + 2 * (size_t)p->start, 2 * sizeof(int64_t) * p->len);
        p->start = 0;
        return 0;
    }
    uint32_t nc = p->cap ? 2 * p->cap : 2;
    int64_t *nv = realloc(p->v, 2 * sizeof(int64_t) * nc);
    if (!nv) return -1;
    p->v = nv;
    p->cap = nc;
    return 0;
}

static int pr_insert(pairs_t *p, uint32_t i, int64_t a, int64_t b) {
    if (pr_room(p) < 0) return -1;
    int64_t *at = pr_at(p, i);
    memmove(at + 2, at, 2 * sizeof(int64_t) * (p->len - i));
    at[0] = a;
    at[1] = b;
    p->len++;
    return 0;
}

static void pr_erase(pairs_t *p, uint32_t i) {
    int64_t *at = pr_at(p, i);
    memmove(at, at + 2, 2 * sizeof(int64_t) * (p->len - i - 1));
    p->len--;
}

static void pr_pop_front(pairs_t *p) {
    p->start++;
    if (--p->len == 0) p->start = 0;
}

/* Latency sketch (netio.analyze.sketch is the reference and states the error
 * bound): counts of at most NETIO_SKETCH_MAX_BINS consecutive log-linear
 * buckets (NETIO_SKETCH_SUB_BITS mantissa bits per octave), the lowest
 * folding into the lowest kept one; exact count, min and max. */
typedef struct {
    int64_t *bins;
    int64_t count, min, max;
    int32_t lo;
    uint16_t len, cap;
} sketch_t;

static inline int32_t sketch_index(int64_t v) {
    if (v < 0) v = 0;
    if (v < (1 << NETIO_SKETCH_SUB_BITS)) return (int32_t)v;
    int e = 63 - __builtin_clzll((uint64_t)v);
    return (int32_t)((e - NETIO_SKETCH_SUB_BITS + 1) * (1 << NETIO_SKETCH_SUB_BITS) +
                     ((v >> (e - NETIO_SKETCH_SUB_BITS)) - (1 << NETIO_SKETCH_SUB_BITS)));
}

static int sketch_room(sketch_t *s, uint32_t need) {
    if (need <= s->cap) return 0;
    uint32_t nc = s->cap ? 2u * s->cap : 4u; /* most flows' latencies fill few buckets */
    while (nc < need) nc *= 2;
    if (nc > NETIO_SKETCH_MAX_BINS) nc = NETIO_SKETCH_MAX_BINS;
    int64_t *nb = realloc(s->bins, nc * sizeof *nb);
    if (!nb) return -1;
    s->bins = nb;
    s->cap = (uint16_t)nc;
    return 0;
}

static int sketch_add(sketch_t *s, int64_t v) {
    int32_t i = sketch_index(v);
    if (s->count == 0) {
        s->min = s->max = v;
    } else {
        if (v < s->min) s->min = v;
        if (v > s->max) s->max = v;
    }
    s->count++;
    if (s->len == 0) {
        if (sketch_room(s, 1) < 0) return -1;
        s->lo = i;
        s->len = 1;
        s->bins[0] = 1;
        return 0;
    }
    int32_t hi = s->lo + s->len - 1;
    if (i > hi) {
        int64_t want = (int64_t)s->len + (i - hi);
        if (want > NETIO_SKETCH_MAX_BINS) {
            int64_t cut = want - NETIO_SKETCH_MAX_BINS; /* buckets lo .. lo+cut fold */
            int64_t folded = 0;
            for (int64_t k = 0; k <= cut && k < s->len; k++) folded += s->bins[k];
            int64_t keep = s->len > cut + 1 ? s->len - (cut + 1) : 0;
            if (keep) memmove(s->bins + 1, s->bins + cut + 1, (size_t)keep * sizeof(int64_t));
            s->bins[0] = folded;
            s->len = (uint16_t)(1 + keep);
            s->lo += (int32_t)cut;
            want = NETIO_SKETCH_MAX_BINS;
        }
        if (sketch_room(s, (uint32_t)want) < 0) return -1;
        memset(s->bins + s->len, 0, (size_t)(want - s->len) * sizeof(int64_t));
        s->len = (uint16_t)want;
    } else if (i < s->lo) {
        int32_t new_lo = hi - NETIO_SKETCH_MAX_BINS + 1;
        if (i > new_lo) new_lo = i;
        int32_t add = s->lo - new_lo;
        if (add > 0) {
            if (sketch_room(s, (uint32_t)(s->len + add)) < 0) return -1;
            memmove(s->bins + add, s->bins, s->len * sizeof(int64_t));
            memset(s->bins, 0, (size_t)add * sizeof(int64_t));
            s->len = (uint16_t)(s->len + add);
            s->lo = new_lo;
        }
        if (i < s->lo) i = s->lo;
    }
    s->bins[i - s->lo]++;
    return 0;
}

/* ------------------------------------------------------------ flow state */

#define OPC_INLINE 4

/* The state only some flows need (READ responses, PSN gaps, READs awaiting
 * their response, READ latency and CNP reaction, CE/CNP times), allocated at
 * its first use: a SEND/WRITE flow without loss or congestion stays small. */
typedef struct {
    uint32_t rr_last_raw; /* READ RESPONSE PSNs */
    uint8_t rr_have;
    int64_t rr_last_u, rr_max_u;
    pairs_t missing, rr_missing; /* open gaps [lo, hi], ascending */
    pairs_t pend_read;           /* (raw PSN, ts) of READ REQUESTs, in arrival order */
    sketch_t lat[2];             /* READ latency, CNP reaction */
    int64_t unanswered_ts, last_cnp_ts;
} flow_rare_t;

typedef struct {
    int64_t c[NETIO_FC_COUNT];
    /* Packets per opcode slot, sparse: a flow rarely uses more than OPC_INLINE
     * opcodes (a SEND flow one, a READ responder's five at most), so their
     * counts live here, and only a flow with more gets the dense opc_more
     * (NETIO_FLOW_OPCODE_SLOTS counts, the inline ones moved into it). */
    uint64_t opc_n[OPC_INLINE];
    uint64_t *opc_more;
    uint8_t opc_slot[OPC_INLINE];
    uint8_t opc_used;
    int64_t *naks; /* 32 per NAK code, allocated at the first NAK */
    /* Request PSNs (unwrapped to 64 bits). */
    int64_t last_u, max_u, last_span;
    uint32_t last_raw;
    uint8_t have;
    uint8_t unanswered; /* a CE mark of this direction awaits its CNP */
    uint8_t cnp_seen;
    pairs_t pend_ack;            /* (PSN, ts) of AckReq requests, by PSN */
    sketch_t ack_lat;            /* ACK latency */
    flow_rare_t *rare;           /* NULL until needed */
    int64_t cur_bin, cur_bytes;  /* data bytes of the open interval */
    int64_t bin_lo, bin_hi;      /* its time range */
    int64_t pair_fail_flows;     /* flow count when pairing last found no candidate */
    int32_t next_same_hosts;     /* next flow with the same (src, dst), -1 at the end */
    int32_t hosts;               /* host pair id */
} flow_t;

typedef struct {
    int32_t head, tail;
} hosts_t;

/* A growable list of (key, bin, value) series entries. */
typedef struct {
    int64_t *v;
    size_t len, cap;
} series_t;

struct netio_analyzer {
    netio_analyzer_config cfg;
    ktable flows_kt, hosts_kt;
    flow_t *flows;
    size_t flows_cap;
    hosts_t *hosts;
    size_t hosts_cap;
    series_t series[3]; /* goodput (fid, bin, bytes), CE (-1, bin, n), CNP (-1, bin, n) */
    int64_t cur_bin[2], cur_n[2], bin_lo[2], bin_hi[2];
    int64_t summary[NETIO_ANALYZER_SUMMARY];
    int oom;
    int shed; /* netio_analyzer_shed ran: only the counters are left */
};

static int series_push(series_t *s, int64_t key, int64_t bin, int64_t value) {
    if (s->len == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 256;
        int64_t *nv = realloc(s->v, 3 * sizeof(int64_t) * nc);
        if (!nv) return -1;
        s->v = nv;
        s->cap = nc;
    }
    int64_t *e = s->v + 3 * s->len++;
    e[0] = key;
    e[1] = bin;
    e[2] = value;
    return 0;
}

/* Interval of ts, (ts - origin) // interval from 0; [*lo, *hi) is set to its time range. */
static inline int64_t bin_of(const netio_analyzer *a, int64_t ts, int64_t *lo, int64_t *hi) {
    int64_t d = ts - a->cfg.origin_ns;
    int64_t b = d <= 0 ? 0 : d / a->cfg.interval_ns;
    *lo = b == 0 ? INT64_MIN : a->cfg.origin_ns + b * a->cfg.interval_ns;
    *hi = a->cfg.origin_ns + (b + 1) * a->cfg.interval_ns;
    return b;
}

/* One more mark in series which (0: CE, 1: CNP) in the interval of ts. */
static inline void count_mark(netio_analyzer *a, int which, int64_t ts) {
    if (ts < a->bin_lo[which] || ts >= a->bin_hi[which]) {
        int64_t b = bin_of(a, ts, &a->bin_lo[which], &a->bin_hi[which]);
        if (b != a->cur_bin[which]) {
            if (a->cur_n[which] &&
                series_push(&a->series[which + 1], -1, a->cur_bin[which], a->cur_n[which]) < 0)
                a->oom = 1;
            a->cur_bin[which] = b;
            a->cur_n[which] = 0;
        }
    }
    a->cur_n[which]++;
}

netio_analyzer *netio_analyzer_new(const netio_analyzer_config *cfg) {
    netio_analyzer *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->cfg = *cfg;
    if (a->cfg.interval_ns < 1) a->cfg.interval_ns = 1;
    if (kt_init(&a->flows_kt) < 0 || kt_init(&a->hosts_kt) < 0) {
        netio_analyzer_free(a);
        return NULL;
    }
    a->cur_bin[0] = a->cur_bin[1] = -1;
    a->bin_lo[0] = a->bin_lo[1] = a->bin_hi[0] = a->bin_hi[1] = 0;
    a->summary[NETIO_AS_FIRST_TS] = 0;
    a->summary[NETIO_AS_LAST_TS] = 0;
    return a;
}

static void flow_release(flow_t *f) {
    free(f->naks);
    free(f->opc_more);
    free(f->pend_ack.v);
    free(f->ack_lat.bins);
    if (f->rare) {
        free(f->rare->missing.v);
        free(f->rare->rr_missing.v);
        free(f->rare->pend_read.v);
        for (int i = 0; i < 2; i++) free(f->rare->lat[i].bins);
        free(f->rare);
    }
}

void netio_analyzer_shed(netio_analyzer *a) {
    if (a->shed) return;
    for (size_t i = 0; i < a->flows_kt.len && a->flows; i++) flow_release(&a->flows[i]);
    free(a->hosts);
    a->hosts = NULL;
    kt_free(&a->flows_kt); /* its len stays: the flow count */
    kt_free(&a->hosts_kt);
    a->flows_kt.slots = a->hosts_kt.slots = NULL;
    a->flows_kt.keys = a->hosts_kt.keys = NULL;
    for (int i = 0; i < 3; i++) {
        free(a->series[i].v);
        a->series[i].v = NULL;
        a->series[i].len = a->series[i].cap = 0;
    }
    a->shed = 1;
}

void netio_analyzer_free(netio_analyzer *a) {
    if (!a) return;
    netio_analyzer_shed(a);
    free(a->flows);
    free(a);
}

/* The id of r's flow, created (with its host-pair link) on first sight; -1: no memory. */
static int64_t flow_of(netio_analyzer *a, const netio_analyze_row *r) {
    fkey k;
    row_key(r, &k);
    int added = 0;
    int64_t fid = kt_find(&a->flows_kt, &k, 1, &added);
    if (fid < 0) return -1;
    if (!added) return fid;
    if ((size_t)fid >= a->flows_cap) {
        size_t nc = a->flows_cap ? 2 * a->flows_cap : 64;
        flow_t *nf = realloc(a->flows, nc * sizeof *nf);
        if (!nf) return -1;
        a->flows = nf;
        a->flows_cap = nc;
    }
    flow_t *f = &a->flows[fid];
    memset(f, 0, sizeof *f);
    f->c[NETIO_FC_PAIR] = -1;
    f->cur_bin = -1;
    f->bin_lo = f->bin_hi = 0;
    f->pair_fail_flows = -1;
    f->next_same_hosts = -1;
    fkey hk = k;
    hk.w[0] &= 1ull << 32;
    int hadded = 0;
    int64_t h = kt_find(&a->hosts_kt, &hk, 1, &hadded);
    if (h < 0) return -1;
    if (hadded) {
        if ((size_t)h >= a->hosts_cap) {
            size_t nc = a->hosts_cap ? 2 * a->hosts_cap : 64;
            hosts_t *nh = realloc(a->hosts, nc * sizeof *nh);
            if (!nh) return -1;
            a->hosts = nh;
            a->hosts_cap = nc;
        }
        a->hosts[h].head = a->hosts[h].tail = (int32_t)fid;
    } else {
        a->flows[a->hosts[h].tail].next_same_hosts = (int32_t)fid;
        a->hosts[h].tail = (int32_t)fid;
    }
    f->hosts = (int32_t)h;
    return fid;
}

static inline int64_t circular(uint32_t a, uint32_t b) {
    int64_t d = ((int64_t)a - (int64_t)b) & PSN_MASK;
    return d < (1ll << 24) - d ? d : (1ll << 24) - d;
}

/* Pair flow fid (which carries a response or CNP) with its reverse direction. */
static void try_pair(netio_analyzer *a, int64_t fid, const netio_analyze_row *r, int response) {
    flow_t *f = &a->flows[fid];
    int64_t nflows = (int64_t)a->flows_kt.len;
    if (f->pair_fail_flows == nflows) return; /* nothing new since no candidate was found */
    const fkey *k = &a->flows_kt.keys[fid];
    fkey rk = {{k->w[0] & (1ull << 32), k->w[3], k->w[4], k->w[1], k->w[2]}};
    int64_t h = kt_find(&a->hosts_kt, &rk, 0, NULL);
    int32_t only = -1, best = -1;
    int ncand = 0;
    int64_t best_d = 0;
    if (h >= 0) {
        for (int32_t x = a->hosts[h].head; x >= 0; x = a->flows[x].next_same_hosts) {
            flow_t *g = &a->flows[x];
            if (x == fid || g->c[NETIO_FC_PAIR] >= 0) continue;
            ncand++;
            only = x;
            if (g->have) {
                int64_t d = circular(g->last_raw, r->psn);
                if (best < 0 || d < best_d) { best = x; best_d = d; }
            }
        }
    }
    if (ncand == 0) {
        f->pair_fail_flows = nflows;
        return;
    }
    int32_t other;
    if (ncand == 1) other = only;
    else if (response && best >= 0) other = best;
    else return;
    f->c[NETIO_FC_PAIR] = other;
    a->flows[other].c[NETIO_FC_PAIR] = fid;
}

/* Open gaps: add [lo, hi] above every other one; fill p (1 if it was missing). */
static void gap_add(netio_analyzer *a, pairs_t *m, int64_t lo, int64_t hi) {
    if (pr_insert(m, m->len, lo, hi) < 0) { a->oom = 1; return; }
    if (m->len > NETIO_FLOW_MAX_MISSING) pr_pop_front(m);
}

static int gap_fill(netio_analyzer *a, pairs_t *m, int64_t p) {
    uint32_t lo = 0, hi = m->len; /* first range with start > p */
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (pr_at(m, mid)[0] <= p) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return 0;
    int64_t *g = pr_at(m, lo - 1);
    if (p > g[1]) return 0;
    int64_t s = g[0], e = g[1];
    if (s == e) pr_erase(m, lo - 1);
    else if (p == s) g[0] = p + 1;
    else if (p == e) g[1] = p - 1;
    else {
        g[1] = p - 1;
        if (pr_insert(m, lo, p + 1, e) < 0) a->oom = 1;
    }
    return 1;
}

/* f's rare state, allocated now if it has none; NULL (and oom set) without memory. */
static flow_rare_t *rare_of(netio_analyzer *a, flow_t *f) {
    if (!f->rare && !(f->rare = calloc(1, sizeof *f->rare))) a->oom = 1;
    return f->rare;
}

static inline void sample(netio_analyzer *a, sketch_t *s, int64_t v) {
    if (sketch_add(s, v) < 0) a->oom = 1;
}

/* Request packet: PSN state machine; returns 1 for a duplicate. */
static int request(netio_analyzer *a, flow_t *f, const netio_analyze_row *r, int64_t ts,
                   uint32_t of) {
    int64_t *c = f->c;
    uint32_t p = r->psn;
    int64_t span = 1;
    if (of & NETIO_OPF_READ_REQUEST) {
        span = ((int64_t)r->reth_len + 255) / 256;
        if (span < 1) span = 1;
    }
    int64_t psn_u, prev_max, tol;
    if (!f->have) {
        psn_u = p;
        prev_max = (int64_t)p - 1;
        tol = 1;
    } else {
        psn_u = f->last_u + psn_delta(p, f->last_raw);
        prev_max = f->max_u;
        tol = f->last_span;
    }
    int64_t ahead = psn_u - prev_max;
    int dup = 0;
    if (ahead > tol) {
        c[NETIO_FC_GAPS]++;
        c[NETIO_FC_GAP_PACKETS] += ahead - tol;
        flow_rare_t *x = rare_of(a, f);
        if (x) gap_add(a, &x->missing, prev_max + tol, psn_u - 1);
    } else if (ahead <= 0) {
        if (f->rare && gap_fill(a, &f->rare->missing, psn_u)) c[NETIO_FC_OOO]++;
        else { c[NETIO_FC_DUPS]++; dup = 1; }
    }
    c[NETIO_FC_REQUESTS]++;
    if (!dup) {
        if (of & NETIO_OPF_ENDS_MESSAGE) c[NETIO_FC_MESSAGES]++;
        c[NETIO_FC_GOODPUT] += r->payload_bytes;
    }
    f->last_raw = p;
    f->last_u = psn_u;
    if (!f->have || psn_u > f->max_u) f->max_u = psn_u;
    f->last_span = span;
    f->have = 1;
    if (dup) return 1;
    if (of & NETIO_OPF_READ_REQUEST) {
        flow_rare_t *x = rare_of(a, f);
        if (!x) return 0;
        pairs_t *q = &x->pend_read;
        if (pr_insert(q, q->len, p, ts) < 0) a->oom = 1;
        if (q->len > NETIO_FLOW_MAX_PENDING) pr_pop_front(q);
    } else if (r->flags & F_ACK_REQ) {
        pairs_t *q = &f->pend_ack;
        uint32_t i = q->len;
        while (i > 0 && pr_at(q, i - 1)[0] > psn_u) i--;
        if (pr_insert(q, i, psn_u, ts) < 0) a->oom = 1;
        if (q->len > NETIO_FLOW_MAX_PENDING) pr_pop_front(q);
    }
    return 0;
}

/* READ RESPONSE packet on the responder's key: returns 1 for a duplicate. */
static int read_response(netio_analyzer *a, flow_t *f, const netio_analyze_row *r, int64_t ts,
                         uint32_t of) {
    int64_t *c = f->c;
    uint32_t p = r->psn;
    int64_t psn_u, prev_max;
    flow_rare_t *x = rare_of(a, f);
    if (!x) return 0;
    if (!x->rr_have) {
        psn_u = p;
        prev_max = (int64_t)p - 1;
    } else {
        psn_u = x->rr_last_u + psn_delta(p, x->rr_last_raw);
        prev_max = x->rr_max_u;
    }
    int64_t ahead = psn_u - prev_max;
    int dup = 0;
    if (ahead > 1) {
        /* A response message may start anywhere ahead (other requests use the
         * PSNs in between); inside a message the next PSN is the next one. */
        if (of & NETIO_OPF_RESPONSE_MIDDLE_LAST) {
            c[NETIO_FC_RR_GAPS]++;
            c[NETIO_FC_RR_GAP_PACKETS] += ahead - 1;
            gap_add(a, &x->rr_missing, prev_max + 1, psn_u - 1);
        }
    } else if (ahead <= 0) {
        if (gap_fill(a, &x->rr_missing, psn_u)) c[NETIO_FC_RR_OOO]++;
        else { c[NETIO_FC_RR_DUPS]++; dup = 1; }
    }
    c[NETIO_FC_RR_PACKETS]++;
    x->rr_last_raw = p;
    x->rr_last_u = psn_u;
    if (!x->rr_have || psn_u > x->rr_max_u) x->rr_max_u = psn_u;
    x->rr_have = 1;
    int64_t fwd = c[NETIO_FC_PAIR];
    flow_rare_t *fx = fwd >= 0 ? a->flows[fwd].rare : NULL; /* none: no READ pending */
    if ((of & NETIO_OPF_READ_RESPONSE_FIRST) && fx) {
        pairs_t *q = &fx->pend_read;
        for (uint32_t i = q->len; i-- > 0;) {
            int64_t *e = pr_at(q, i);
            if (e[0] == p) {
                int64_t t_req = e[1];
                pr_erase(q, i);
                if (t_req <= ts) sample(a, &fx->lat[0], ts - t_req);
                break;
            }
        }
    }
    return dup;
}

/* An ACK (syndrome ACK, opcode ACKNOWLEDGE) on the responder's key at ts. */
static void ack_latency(netio_analyzer *a, flow_t *rf, const netio_analyze_row *r, int64_t ts) {
    int64_t fwd = rf->c[NETIO_FC_PAIR];
    if (fwd < 0) return;
    flow_t *f = &a->flows[fwd];
    pairs_t *q = &f->pend_ack;
    if (!f->have || q->len == 0) return;
    int64_t a_u = f->max_u + psn_delta(r->psn, (uint32_t)(f->max_u & PSN_MASK));
    uint32_t j = 0;
    int kept = 0;
    for (; j < q->len && pr_at(q, j)[0] <= a_u; j++) {
        int64_t *e = pr_at(q, j);
        if (e[1] <= ts) sample(a, &f->ack_lat, ts - e[1]);
        else kept = 1;
    }
    if (!kept) {
        q->start += j;
        q->len -= j;
        if (q->len == 0) q->start = 0;
        return;
    }
    /* Requests captured after this ACK stay pending, in order. */
    uint32_t w = j;
    for (uint32_t i = j; i-- > 0;) {
        int64_t *e = pr_at(q, i);
        if (e[1] > ts) {
            w--;
            int64_t *d = pr_at(q, w);
            d[0] = e[0];
            d[1] = e[1];
        }
    }
    q->start += w;
    q->len -= w;
}

/* One more packet of opcode slot `slot` on flow f; -1: no memory. */
static int opc_add(flow_t *f, uint8_t slot) {
    if (f->opc_more) {
        f->opc_more[slot]++;
        return 0;
    }
    for (int i = 0; i < f->opc_used; i++) {
        if (f->opc_slot[i] == slot) {
            f->opc_n[i]++;
            return 0;
        }
    }
    if (f->opc_used < OPC_INLINE) {
        f->opc_slot[f->opc_used] = slot;
        f->opc_n[f->opc_used++] = 1;
        return 0;
    }
    if (!(f->opc_more = calloc(NETIO_FLOW_OPCODE_SLOTS, sizeof(uint64_t)))) return -1;
    for (int i = 0; i < f->opc_used; i++) f->opc_more[f->opc_slot[i]] = f->opc_n[i];
    f->opc_more[slot]++;
    return 0;
}

/* All per-packet RoCE analyses of one (filtered) RoCE row. */
static void flow_packet(netio_analyzer *a, const netio_analyze_row *r, int64_t ts,
                        uint32_t frame_bytes) {
    int64_t fid = flow_of(a, r);
    if (fid < 0) { a->oom = 1; return; }
    flow_t *f = &a->flows[fid];
    int64_t *c = f->c;
    uint8_t op = r->opcode;
    uint32_t of = a->cfg.opflags[op];
    if (c[NETIO_FC_PACKETS] == 0) c[NETIO_FC_FIRST_TS] = ts;
    c[NETIO_FC_PACKETS]++;
    c[NETIO_FC_BYTES] += frame_bytes;
    c[NETIO_FC_PAYLOAD] += r->payload_bytes;
    if (r->ecn == 3) c[NETIO_FC_CE]++;
    else if (r->ecn) c[NETIO_FC_ECT]++;
    if (r->flags & F_FECN) c[NETIO_FC_FECN]++;
    if (r->flags & F_BECN) c[NETIO_FC_BECN]++;
    if (r->flags & F_ICRC_CHECKED) {
        c[NETIO_FC_ICRC_CHECKED]++;
        if (!(r->flags & F_ICRC_OK)) c[NETIO_FC_ICRC_BAD]++;
    }
    if (opc_add(f, a->cfg.opslot[op]) < 0) { a->oom = 1; return; }
    c[NETIO_FC_SRC_MAC] = (int64_t)r->src_mac;
    c[NETIO_FC_DST_MAC] = (int64_t)r->dst_mac;
    c[NETIO_FC_PCP] = r->pcp;
    c[NETIO_FC_LAST_TS] = ts;
    int64_t data = 0;
    if (of & NETIO_OPF_REQUEST) {
        if (!request(a, f, r, ts, of)) data = r->payload_bytes;
    }
    if ((of & (NETIO_OPF_RESPONSE | NETIO_OPF_CNP)) && c[NETIO_FC_PAIR] < 0) {
        try_pair(a, fid, r, (of & NETIO_OPF_RESPONSE) != 0);
        f = &a->flows[fid];
        c = f->c;
    }
    if (of & NETIO_OPF_READ_RESPONSE) {
        if (!read_response(a, f, r, ts, of)) data = r->payload_bytes;
    } else if ((of & NETIO_OPF_RESPONSE) && !(of & NETIO_OPF_ACKNOWLEDGE)) {
        data = r->payload_bytes;
    }
    if (of & NETIO_OPF_AETH) {
        uint32_t syn = r->syndrome;
        uint32_t type = (syn >> 5) & 3;
        if (type == 3) {
            if (!f->naks && !(f->naks = calloc(32, sizeof(int64_t)))) { a->oom = 1; return; }
            f->naks[syn & 31]++;
            c[NETIO_FC_NAKS]++;
        } else if (type == 1) {
            c[NETIO_FC_RNR]++;
            c[NETIO_FC_RNR_CODES] |= 1ll << (syn & 31);
        } else if (type == 0 && (of & NETIO_OPF_ACKNOWLEDGE)) {
            ack_latency(a, f, r, ts);
        }
    }
    if (r->ecn == 3) {
        flow_rare_t *x = f->unanswered ? NULL : rare_of(a, f);
        if (x) {
            f->unanswered = 1;
            x->unanswered_ts = ts;
        }
        count_mark(a, 0, ts);
    }
    if (of & NETIO_OPF_CNP) {
        c[NETIO_FC_CNPS]++;
        flow_rare_t *x = rare_of(a, f);
        if (!x) return;
        if (f->cnp_seen && ts - x->last_cnp_ts < a->cfg.cnp_min_gap_ns) c[NETIO_FC_CNP_VIOLATIONS]++;
        f->cnp_seen = 1;
        x->last_cnp_ts = ts;
        int64_t d = c[NETIO_FC_PAIR];
        if (d < 0) {
            c[NETIO_FC_CNP_UNMATCHED]++;
        } else {
            flow_t *df = &a->flows[d];
            /* unanswered is set only with the rare state */
            if (df->unanswered && df->rare->unanswered_ts <= ts) {
                sample(a, &df->rare->lat[1], ts - df->rare->unanswered_ts);
                df->unanswered = 0;
            }
        }
        count_mark(a, 1, ts);
    }
    if (data > 0) {
        c[NETIO_FC_DATA_PAYLOAD] += data;
        if (ts < f->bin_lo || ts >= f->bin_hi) {
            int64_t b = bin_of(a, ts, &f->bin_lo, &f->bin_hi);
            if (b != f->cur_bin) {
                if (f->cur_bytes && series_push(&a->series[0], fid, f->cur_bin, f->cur_bytes) < 0)
                    a->oom = 1;
                f->cur_bin = b;
                f->cur_bytes = 0;
            }
        }
        f->cur_bytes += data;
    }
}

/* ------------------------------------------------------------ the passes */

static inline int keep_roce(const netio_analyzer_config *cfg, const netio_analyze_row *r) {
    uint32_t bit = (r->flags & F_VLAN) ? (r->pcp & 7u) : 8u;
    if (!((cfg->roce_pcp_mask >> bit) & 1u)) return 0;
    uint32_t ff = cfg->flow_filter;
    if (!ff) return 1;
    int v6 = (r->flags & F_IPV6) != 0;
    /* An address given in one IP version never matches a packet of the other. */
    int same = v6 == ((ff & NETIO_FLOW_FILTER_IPV6) != 0);
    int fwd = 1, rev = 1;
    if (ff & NETIO_FLOW_FILTER_SRC) {
        fwd &= same && (v6 ? !memcmp(r->src_ip6, cfg->flow_src_ip6, 16)
                           : r->src_ip == cfg->flow_src_ip);
        rev &= same && (v6 ? !memcmp(r->dst_ip6, cfg->flow_src_ip6, 16)
                           : r->dst_ip == cfg->flow_src_ip);
    }
    if (ff & NETIO_FLOW_FILTER_DST) {
        fwd &= same && (v6 ? !memcmp(r->dst_ip6, cfg->flow_dst_ip6, 16)
                           : r->dst_ip == cfg->flow_dst_ip);
        rev &= same && (v6 ? !memcmp(r->src_ip6, cfg->flow_dst_ip6, 16)
                           : r->src_ip == cfg->flow_dst_ip);
    }
    if (ff & NETIO_FLOW_FILTER_QP) fwd &= r->dest_qp == cfg->flow_dest_qp;
    return fwd || rev;
}

int netio_analyzer_feed(netio_analyzer *a, const uint8_t *buf, size_t buf_len,
                        const int64_t *ts_ns, const int64_t *frame_offset,
                        const uint32_t *caplen, const uint32_t *orig_len,
                        const uint16_t *linktype, size_t n, netio_analyze_columns *ctl,
                        size_t ctl_cap, size_t *ctl_n) {
    const netio_analyzer_config *cfg = &a->cfg;
    int64_t *sum = a->summary;
    size_t nc = *ctl_n;
    for (size_t i = 0; i < n; i++) {
        if (i + 4 < n) {
            size_t po = (size_t)frame_offset[i + 4];
            if (po < buf_len) __builtin_prefetch(buf + po);
        }
        int64_t ts = ts_ns[i];
        if (ts < cfg->start_ns || ts >= cfg->end_ns) continue;
        size_t off = (size_t)frame_offset[i];
        size_t cap = caplen[i];
        if (off > buf_len || cap > buf_len - off) cap = off > buf_len ? 0 : buf_len - off;
        const uint8_t *f = buf + (off > buf_len ? buf_len : off);
        netio_analyze_row r;
        analyze_frame(f, cap, orig_len[i], linktype[i], cfg->verify_icrc, &r);
        if (r.kind == K_ROCE && !keep_roce(cfg, &r)) continue;
        if (sum[NETIO_AS_ROWS]++ == 0) sum[NETIO_AS_FIRST_TS] = ts;
        sum[NETIO_AS_LAST_TS] = ts;
        sum[r.kind]++;
        if (r.kind == K_ROCE) {
            flow_packet(a, &r, ts, orig_len[i]);
        } else if (r.kind == K_PFC || r.kind == K_PAUSE) {
            if (nc >= ctl_cap) return -2;
            netio_analyze_store(ctl, nc, &r);
            ctl->ts_ns[nc] = ts;
            ctl->frame_bytes[nc] = orig_len[i];
            nc++;
        }
    }
    *ctl_n = nc;
    return a->oom ? -1 : 0;
}

int netio_analyzer_feed_columns(netio_analyzer *a, const netio_analyze_columns *cols, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (cols->kind[i] != K_ROCE) continue;
        netio_analyze_row r;
        netio_analyze_load(cols, i, &r);
        flow_packet(a, &r, cols->ts_ns[i], cols->frame_bytes[i]);
    }
    return a->oom ? -1 : 0;
}

void netio_analyzer_summary(const netio_analyzer *a, int64_t *out) {
    memcpy(out, a->summary, sizeof a->summary);
}

size_t netio_analyzer_flows(const netio_analyzer *a) { return a->flows_kt.len; }

void netio_analyzer_export(const netio_analyzer *a, uint64_t *keys, int64_t *counters) {
    size_t n = a->flows_kt.len;
    for (size_t i = 0; i < n; i++) {
        if (keys && !a->shed) memcpy(keys + 5 * i, a->flows_kt.keys[i].w, sizeof(fkey));
        if (counters) memcpy(counters + NETIO_FC_COUNT * i, a->flows[i].c, sizeof a->flows[i].c);
    }
}

/* Flow f's non-zero counts of which (0: opcode slots, 1: NAK codes) as
 * (fid, slot or code, count) triples in ascending slot/code order, written
 * from out (NULL: only counted); returns how many. */
static size_t sparse_of(const flow_t *f, size_t fid, int which, int64_t *out) {
    size_t k = 0;
    const uint64_t *dense = which == 0 ? f->opc_more : (const uint64_t *)f->naks;
    size_t slots = which == 0 ? NETIO_FLOW_OPCODE_SLOTS : 32;
    if (dense) {
        for (size_t j = 0; j < slots; j++) {
            if (!dense[j]) continue;
            if (out) {
                out[3 * k] = (int64_t)fid;
                out[3 * k + 1] = (int64_t)j;
                out[3 * k + 2] = (int64_t)dense[j];
            }
            k++;
        }
        return k;
    }
    if (which != 0) return 0;
    /* inline opcode counts, in first-seen order: emit by ascending slot */
    int done = 0;
    for (int pass = 0; pass < f->opc_used; pass++) {
        int best = -1;
        for (int i = 0; i < f->opc_used; i++)
            if (!(done >> i & 1) && (best < 0 || f->opc_slot[i] < f->opc_slot[best])) best = i;
        done |= 1 << best;
        if (out) {
            out[3 * k] = (int64_t)fid;
            out[3 * k + 1] = f->opc_slot[best];
            out[3 * k + 2] = (int64_t)f->opc_n[best];
        }
        k++;
    }
    return k;
}

size_t netio_analyzer_sparse_len(const netio_analyzer *a, int which) {
    size_t k = 0;
    for (size_t i = 0; i < a->flows_kt.len; i++) k += sparse_of(&a->flows[i], i, which, NULL);
    return k;
}

void netio_analyzer_sparse(const netio_analyzer *a, int which, int64_t *out) {
    size_t k = 0;
    for (size_t i = 0; i < a->flows_kt.len; i++)
        k += sparse_of(&a->flows[i], i, which, out + 3 * k);
}

/* Sketch k of f (0 ACK latency, 1 READ latency, 2 CNP reaction); an empty one
 * when f has no rare state. */
static const sketch_t *flow_sketch(const flow_t *f, int k) {
    static const sketch_t empty;
    if (k == 0) return &f->ack_lat;
    return f->rare ? &f->rare->lat[k - 1] : &empty;
}

size_t netio_analyzer_sketch_count(const netio_analyzer *a) {
    size_t n = 0;
    for (size_t i = 0; i < a->flows_kt.len; i++)
        for (int k = 0; k < 3; k++) n += flow_sketch(&a->flows[i], k)->count != 0;
    return n;
}

size_t netio_analyzer_sketches(const netio_analyzer *a, int64_t *headers) {
    size_t total = 0;
    for (size_t i = 0; i < a->flows_kt.len; i++) {
        for (int k = 0; k < 3; k++) {
            const sketch_t *s = flow_sketch(&a->flows[i], k);
            if (!s->count) continue;
            headers[0] = (int64_t)(3 * i + (size_t)k);
            headers[1] = s->lo;
            headers[2] = s->len;
            headers[3] = s->count;
            headers[4] = s->min;
            headers[5] = s->max;
            headers += 6;
            total += s->len;
        }
    }
    return total;
}

void netio_analyzer_sketch_bins(const netio_analyzer *a, int64_t *out) {
    for (size_t i = 0; i < a->flows_kt.len; i++) {
        for (int k = 0; k < 3; k++) {
            const sketch_t *s = flow_sketch(&a->flows[i], k);
            if (s->len) memcpy(out, s->bins, s->len * sizeof(int64_t));
            out += s->len;
        }
    }
}

static int cmp_bin(const void *x, const void *y) {
    int64_t a = ((const int64_t *)x)[0], b = ((const int64_t *)y)[0];
    return (a > b) - (a < b);
}

size_t netio_analyzer_flow_series(const netio_analyzer *a, int64_t *fid_out, int64_t *bin_out,
                                  int64_t *val_out) {
    size_t nf = a->flows_kt.len;
    const series_t *s = &a->series[0];
    size_t *start = calloc(nf + 1, sizeof *start), *cur = malloc((nf + 1) * sizeof *cur);
    if (!start || !cur) {
        free(start);
        free(cur);
        return SIZE_MAX;
    }
    /* Counting sort by flow (stable: each flow's entries stay in capture order),
     * each flow's open interval last. */
    for (size_t k = 0; k < s->len; k++) start[s->v[3 * k] + 1]++;
    for (size_t i = 0; i < nf; i++) start[i + 1] += a->flows[i].cur_bytes != 0;
    for (size_t i = 0; i < nf; i++) start[i + 1] += start[i];
    memcpy(cur, start, (nf + 1) * sizeof *cur);
    for (size_t k = 0; k < s->len; k++) {
        size_t j = cur[s->v[3 * k]]++;
        bin_out[j] = s->v[3 * k + 1];
        val_out[j] = s->v[3 * k + 2];
    }
    for (size_t i = 0; i < nf; i++) {
        if (!a->flows[i].cur_bytes) continue;
        size_t j = cur[i]++;
        bin_out[j] = a->flows[i].cur_bin;
        val_out[j] = a->flows[i].cur_bytes;
    }
    free(cur);
    /* Per flow: intervals ascending (out of order only when timestamps go
     * back), entries of one interval summed; written compacted from 0. */
    size_t w = 0;
    for (size_t i = 0; i < nf; i++) {
        size_t lo = start[i], hi = start[i + 1];
        int sorted = 1;
        for (size_t k = lo + 1; k < hi && sorted; k++) sorted = bin_out[k - 1] <= bin_out[k];
        if (!sorted) {
            int64_t *tmp = malloc((hi - lo) * 2 * sizeof *tmp);
            if (!tmp) {
                free(start);
                return SIZE_MAX;
            }
            for (size_t k = lo; k < hi; k++) {
                tmp[2 * (k - lo)] = bin_out[k];
                tmp[2 * (k - lo) + 1] = val_out[k];
            }
            qsort(tmp, hi - lo, 2 * sizeof *tmp, cmp_bin); /* equal bins are summed: order moot */
            for (size_t k = lo; k < hi; k++) {
                bin_out[k] = tmp[2 * (k - lo)];
                val_out[k] = tmp[2 * (k - lo) + 1];
            }
            free(tmp);
        }
        size_t first = w;
        for (size_t k = lo; k < hi; k++) {
            if (w > first && bin_out[w - 1] == bin_out[k]) {
                val_out[w - 1] += val_out[k];
                continue;
            }
            fid_out[w] = (int64_t)i;
            bin_out[w] = bin_out[k];
            val_out[w] = val_out[k];
            w++;
        }
    }
    free(start);
    return w;
}

size_t netio_analyzer_series_len(const netio_analyzer *a, int which) {
    if (which < 0 || which > 2) return 0;
    size_t n = a->series[which].len;
    if (which == 0) {
        for (size_t i = 0; i < a->flows_kt.len; i++) n += a->flows[i].cur_bytes != 0;
    } else {
        n += a->cur_n[which - 1] != 0;
    }
    return n;
}

void netio_analyzer_series(const netio_analyzer *a, int which, int64_t *out) {
    if (which < 0 || which > 2) return;
    const series_t *s = &a->series[which];
    if (s->len) memcpy(out, s->v, 3 * sizeof(int64_t) * s->len);
    size_t k = s->len;
    if (which == 0) {
        for (size_t i = 0; i < a->flows_kt.len; i++) {
            const flow_t *f = &a->flows[i];
            if (!f->cur_bytes) continue;
            out[3 * k] = (int64_t)i;
            out[3 * k + 1] = f->cur_bin;
            out[3 * k + 2] = f->cur_bytes;
            k++;
        }
    } else if (a->cur_n[which - 1]) {
        out[3 * k] = -1;
        out[3 * k + 1] = a->cur_bin[which - 1];
        out[3 * k + 2] = a->cur_n[which - 1];
    }
}
