/* netio native hot paths. Declarations between CDEF BEGIN/END are read by
 * netio/_ffi_build.py for cffi, so they must stay plain C (no macros). */
#ifndef NETIO_NATIVE_H
#define NETIO_NATIVE_H
#include <stddef.h>
#include <stdint.h>

/* CDEF BEGIN */
/* CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) as zlib.crc32: pass the
 * previous return value as crc to continue a running checksum. */
uint32_t netio_crc32(uint32_t crc, const uint8_t *buf, size_t len);
/* Which CRC implementation netio_crc32 uses: "pclmul" or "slice8". */
const char *netio_crc32_impl(void);
/* CDEF END */

#endif
