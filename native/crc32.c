/* CRC-32 for the RoCEv2 ICRC (IBTA Annex A17: the Ethernet CRC-32 over the
 * masked packet).
 *
 * Two implementations of the same reflected CRC (poly 0xEDB88320):
 *  - slicing-by-8: eight 256-entry tables let the loop consume 8 bytes per
 *    iteration with independent lookups (portable fallback, short inputs);
 *  - PCLMULQDQ folding (x86-64): carry-less multiplication folds four 128-bit
 *    lanes by 512 bits per step, then reduces with Barrett (Gopal et al.,
 *    "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 *    Instruction", Intel 2009). Chosen at load time through cpuid, so the
 *    library still runs on CPUs without the instruction.
 * Internally the functions take and return the raw register (pre/post
 * inversion is done once by the public entry points). */
#include <string.h>

#include "netio_native.h"

static uint32_t crc_table[8][256];

static uint32_t crc32_slice8_raw(uint32_t crc, const uint8_t *p, size_t len) {
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
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define NETIO_HAVE_PCLMUL_CODE 1

/* Folding constants for the bit-reflected polynomial 0x1DB710641:
 * x^(4*128+32), x^(4*128-32) mod P (4-lane fold), x^(128+32), x^(128-32)
 * (1-lane fold), x^64 mod P (64->32 step), then P' and mu' for Barrett. */
#define K1 0x0154442bd4ULL
#define K2 0x01c6e41596ULL
#define K3 0x01751997d0ULL
#define K4 0x00ccaa009eULL
#define K5 0x0163cd6124ULL
#define P_PRIME 0x01db710641ULL
#define MU_PRIME 0x01f7011641ULL

__attribute__((target("pclmul,sse4.1")))
static inline __m128i fold16(__m128i acc, __m128i k, __m128i data) {
    __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), data);
}

/* Needs len >= 64; consumes a multiple of 16 bytes, the rest goes to slice8. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc32_pclmul_raw(uint32_t crc, const uint8_t *p, size_t len) {
    if (len < 64)
        return crc32_slice8_raw(crc, p, len);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;

    __m128i k = _mm_set_epi64x((long long)K2, (long long)K1);
    while (len >= 64) {
        x1 = fold16(x1, k, _mm_loadu_si128((const __m128i *)(p + 0)));
        x2 = fold16(x2, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = fold16(x3, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = fold16(x4, k, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        len -= 64;
    }

    /* Four lanes into one. */
    k = _mm_set_epi64x((long long)K4, (long long)K3);
    x1 = fold16(x1, k, x2);
    x1 = fold16(x1, k, x3);
    x1 = fold16(x1, k, x4);
    while (len >= 16) {
        x1 = fold16(x1, k, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }

    /* 128 -> 64 bits. */
    const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i t = _mm_clmulepi64_si128(x1, k, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), t);
    /* 64 -> 32 bits. */
    __m128i k5 = _mm_set_epi64x(0, (long long)K5);
    t = _mm_srli_si128(x1, 4);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00);
    x1 = _mm_xor_si128(x1, t);
    /* Barrett reduction to the 32-bit remainder. */
    __m128i poly = _mm_set_epi64x((long long)MU_PRIME, (long long)P_PRIME);
    t = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), poly, 0x00);
    x1 = _mm_xor_si128(x1, t);
    crc = (uint32_t)_mm_extract_epi32(x1, 1);

    return len ? crc32_slice8_raw(crc, p, len) : crc;
}
#endif

typedef uint32_t (*crc_fn)(uint32_t, const uint8_t *, size_t);
static crc_fn crc32_best = crc32_slice8_raw;
static int pclmul_ok = 0;

__attribute__((constructor)) static void crc32_init(void) {
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
#ifdef NETIO_HAVE_PCLMUL_CODE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) {
        pclmul_ok = 1;
        crc32_best = crc32_pclmul_raw;
    }
#endif
}

uint32_t netio_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
    return ~crc32_best(~crc, buf, len);
}

uint32_t netio_crc32_slice8(uint32_t crc, const uint8_t *buf, size_t len) {
    return ~crc32_slice8_raw(~crc, buf, len);
}

uint32_t netio_crc32_pclmul(uint32_t crc, const uint8_t *buf, size_t len) {
#ifdef NETIO_HAVE_PCLMUL_CODE
    if (pclmul_ok)
        return ~crc32_pclmul_raw(~crc, buf, len);
#endif
    return ~crc32_slice8_raw(~crc, buf, len);
}

int netio_crc32_pclmul_supported(void) { return pclmul_ok; }

const char *netio_crc32_impl(void) { return pclmul_ok ? "pclmul" : "slice8"; }
