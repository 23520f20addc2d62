/* Fast capture scanning: walk the packet records of a classic pcap file, or
 * the packet blocks of a pcapng section, in a memory buffer (an mmap of the
 * file) and fill caller-provided column arrays.
 *
 * The pure-Python reference is netio/pcap/scan.py (which drives this
 * function) over the decoders in netio/pcap/pcap.py and pcapng.py; the checks
 * below are made in the same order, so both stop at the same record with the
 * same status. Formats: draft-ietf-opsawg-pcap §5 (records),
 * draft-ietf-opsawg-pcapng §3.1 (block layout), §4.3 EPB, §4.4 SPB, appendix
 * A (obsolete PB). SHB and IDB are left to the Python caller (status BLOCK).
 *
 * Every length is checked against the bytes left before it is used, and each
 * step advances by at least 12 bytes, so damaged input can neither read out
 * of bounds nor loop. */
#include <string.h>

#include "netio_native.h"

#define MAX_CAPLEN 262144u
#define MAX_BLOCK (16u * 1024u * 1024u)
#define SHB_TYPE 0x0A0D0D0Au
#define IDB_TYPE 1u
#define PB_TYPE 2u
#define SPB_TYPE 3u
#define EPB_TYPE 6u

static inline uint32_t rd32(const uint8_t *p, uint32_t big_endian) {
    uint32_t v;
    memcpy(&v, p, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return big_endian ? v : __builtin_bswap32(v);
#else
    return big_endian ? __builtin_bswap32(v) : v;
#endif
}

static inline uint16_t rd16(const uint8_t *p, uint32_t big_endian) {
    uint16_t v;
    memcpy(&v, p, 2);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return big_endian ? v : __builtin_bswap16(v);
#else
    return big_endian ? __builtin_bswap16(v) : v;
#endif
}

static inline void stop(netio_pcap_scan_state *st, uint32_t status, int64_t block_type,
                        uint64_t value, uint64_t limit) {
    st->status = status;
    st->block_type = block_type;
    st->value = value;
    st->limit = limit;
}

static size_t scan_pcap(const uint8_t *buf, size_t len, netio_pcap_scan_state *st,
                        size_t max_records, int64_t *ts_ns, int64_t *frame_offset,
                        uint32_t *caplen, uint32_t *orig_len, uint16_t *linktype,
                        uint32_t *interface_id) {
    const uint32_t be = st->big_endian;
    const int64_t unit = st->ts_unit_ns;
    const uint16_t lt = (uint16_t)st->linktype;
    size_t off = st->offset, n = 0;
    while (n < max_records) {
        size_t left = len - off;
        if (left == 0) {
            stop(st, NETIO_SCAN_END, 0, 0, 0);
            goto out;
        }
        if (left < 16) {
            stop(st, NETIO_SCAN_TRUNCATED_HEADER, 0, left, 16);
            goto out;
        }
        const uint8_t *p = buf + off;
        uint32_t cap = rd32(p + 8, be);
        if (cap > MAX_CAPLEN) {
            stop(st, NETIO_SCAN_CAPLEN_TOO_BIG, 0, cap, MAX_CAPLEN);
            goto out;
        }
        if (left - 16 < cap) {
            stop(st, NETIO_SCAN_TRUNCATED_DATA, 0, left, 16 + (uint64_t)cap);
            goto out;
        }
        ts_ns[n] = (int64_t)rd32(p, be) * 1000000000 + (int64_t)rd32(p + 4, be) * unit;
        frame_offset[n] = (int64_t)(off + 16);
        caplen[n] = cap;
        orig_len[n] = rd32(p + 12, be);
        linktype[n] = lt;
        interface_id[n] = 0;
        n++;
        off += 16 + (size_t)cap;
        /* Records tend to come in runs of one size: fetch the next two headers
         * early, guessing each is as far again (a wrong guess costs little). */
        if (off + 2 * (16 + (size_t)cap) < len) {
            __builtin_prefetch(buf + off + 16 + cap);
            __builtin_prefetch(buf + off + 2 * (16 + (size_t)cap));
        }
    }
    stop(st, NETIO_SCAN_FULL, 0, 0, 0);
out:
    st->offset = off;
    st->record_index += n;
    return n;
}

/* ns = ((units * mul) / div) >> shift, plus the interface offset; 0 on overflow
 * of int64, reported through *ok. */
static inline int64_t iface_ts_ns(const netio_pcap_iface *ifc, uint64_t units, int *ok) {
    unsigned __int128 scaled = (unsigned __int128)units * ifc->ts_mul;
    if (ifc->ts_div != 1)
        scaled /= ifc->ts_div;
    scaled >>= ifc->ts_shift;
    __int128 total = (__int128)scaled + (__int128)ifc->tsoffset_s * 1000000000;
    if (total > (__int128)INT64_MAX || total < (__int128)INT64_MIN) {
        *ok = 0;
        return 0;
    }
    *ok = 1;
    return (int64_t)total;
}

static size_t scan_pcapng(const uint8_t *buf, size_t len, netio_pcap_scan_state *st,
                          size_t max_records, int64_t *ts_ns, int64_t *frame_offset,
                          uint32_t *caplen, uint32_t *orig_len, uint16_t *linktype,
                          uint32_t *interface_id) {
    const uint32_t be = st->big_endian;
    const netio_pcap_iface *ifaces = st->ifaces;
    const uint32_t n_ifaces = st->n_ifaces;
    size_t off = st->offset, n = 0;
    while (n < max_records) {
        size_t left = len - off;
        if (left == 0) {
            stop(st, NETIO_SCAN_END, 0, 0, 0);
            goto out;
        }
        if (left < 8) {
            stop(st, NETIO_SCAN_TRUNCATED_HEADER, -1, left, 8);
            goto out;
        }
        const uint8_t *p = buf + off;
        uint32_t type = rd32(p, be);
        if (type == SHB_TYPE) {
            stop(st, NETIO_SCAN_BLOCK, type, 0, 0);
            goto out;
        }
        uint32_t total = rd32(p + 4, be);
        if (total < 12 || (total & 3u) || total > MAX_BLOCK) {
            stop(st, NETIO_SCAN_BAD_BLOCK_LENGTH, type, total, 12);
            goto out;
        }
        if (total > left) {
            stop(st, NETIO_SCAN_TRUNCATED_DATA, type, left, total);
            goto out;
        }
        uint32_t trailer = rd32(p + total - 4, be);
        if (trailer != total) {
            stop(st, NETIO_SCAN_BLOCK_LENGTH_MISMATCH, type, trailer, total);
            goto out;
        }
        if (type == EPB_TYPE || type == PB_TYPE) {
            if (total < 32) {
                stop(st, NETIO_SCAN_BAD_BLOCK_LENGTH, type, total, 32);
                goto out;
            }
            uint32_t ifid = type == EPB_TYPE ? rd32(p + 8, be) : rd16(p + 8, be);
            if (ifid >= n_ifaces) {
                stop(st, NETIO_SCAN_UNKNOWN_INTERFACE, type, ifid, n_ifaces);
                goto out;
            }
            uint32_t cap = rd32(p + 20, be);
            if (cap > MAX_CAPLEN) {
                stop(st, NETIO_SCAN_CAPLEN_TOO_BIG, type, cap, MAX_CAPLEN);
                goto out;
            }
            if (28u + cap + 4u > total) {
                stop(st, NETIO_SCAN_CAPLEN_EXCEEDS_BLOCK, type, cap, total);
                goto out;
            }
            uint64_t units = ((uint64_t)rd32(p + 12, be) << 32) | rd32(p + 16, be);
            int ok;
            int64_t ts = iface_ts_ns(&ifaces[ifid], units, &ok);
            if (!ok) {
                stop(st, NETIO_SCAN_TIMESTAMP_RANGE, type, units, 0);
                goto out;
            }
            ts_ns[n] = ts;
            frame_offset[n] = (int64_t)(off + 28);
            caplen[n] = cap;
            orig_len[n] = rd32(p + 24, be);
            linktype[n] = (uint16_t)ifaces[ifid].linktype;
            interface_id[n] = ifid;
            n++;
        } else if (type == SPB_TYPE) {
            if (total < 16) {
                stop(st, NETIO_SCAN_BAD_BLOCK_LENGTH, type, total, 16);
                goto out;
            }
            if (n_ifaces == 0) {
                stop(st, NETIO_SCAN_UNKNOWN_INTERFACE, type, 0, 0);
                goto out;
            }
            uint32_t olen = rd32(p + 8, be);
            uint32_t cap = olen < total - 16 ? olen : total - 16;
            if (ifaces[0].snaplen != 0 && ifaces[0].snaplen < cap)
                cap = ifaces[0].snaplen;
            if (cap > MAX_CAPLEN) {
                stop(st, NETIO_SCAN_CAPLEN_TOO_BIG, type, cap, MAX_CAPLEN);
                goto out;
            }
            ts_ns[n] = 0;
            frame_offset[n] = (int64_t)(off + 12);
            caplen[n] = cap;
            orig_len[n] = olen;
            linktype[n] = (uint16_t)ifaces[0].linktype;
            interface_id[n] = 0;
            n++;
        } else if (type == IDB_TYPE) {
            stop(st, NETIO_SCAN_BLOCK, type, 0, 0);
            goto out;
        }
        off += total;
    }
    stop(st, NETIO_SCAN_FULL, 0, 0, 0);
out:
    st->offset = off;
    st->record_index += n;
    return n;
}

size_t netio_pcap_scan(const uint8_t *buf, size_t len, netio_pcap_scan_state *st,
                       size_t max_records, int64_t *ts_ns, int64_t *frame_offset,
                       uint32_t *caplen, uint32_t *orig_len, uint16_t *linktype,
                       uint32_t *interface_id) {
    if (st->offset > len) {
        stop(st, NETIO_SCAN_TRUNCATED_HEADER, st->format == 2 ? -1 : 0, 0, 0);
        return 0;
    }
    if (st->format == 2)
        return scan_pcapng(buf, len, st, max_records, ts_ns, frame_offset, caplen, orig_len,
                           linktype, interface_id);
    return scan_pcap(buf, len, st, max_records, ts_ns, frame_offset, caplen, orig_len,
                     linktype, interface_id);
}
