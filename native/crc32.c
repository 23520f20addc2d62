/* CRC-32 for the RoCEv2 ICRC (IBTA Annex A17: the Ethernet CRC-32 over the
 * masked packet). Slicing-by-8: eight 256-entry tables let the loop consume
 * 8 bytes per iteration with independent lookups. */
#include <string.h>

#include "netio_native.h"

static uint32_t crc_table[8][256];

__attribute__((constructor)) static void crc32_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFFu] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

static uint32_t crc32_slice8(uint32_t crc, const uint8_t *p, size_t len) {
    crc = ~crc;
    while (len && ((uintptr_t)p & 7u)) {
        crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = crc_table[7][lo & 0xFFu] ^ crc_table[6][(lo >> 8) & 0xFFu] ^
              crc_table[5][(lo >> 16) & 0xFFu] ^ crc_table[4][lo >> 24] ^
              crc_table[3][hi & 0xFFu] ^ crc_table[2][(hi >> 8) & 0xFFu] ^
              crc_table[1][(hi >> 16) & 0xFFu] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

uint32_t netio_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    return crc32_slice8(crc, buf, len);
}

const char *netio_crc32_impl(void) { return "slice8"; }
