/* RoCEv2 invariant CRC (IBTA Annex A17.3.3; Linux drivers/infiniband/sw/rxe/rxe_icrc.c).
 *
 * The ICRC is the CRC-32 of: 8 bytes of 0xFF standing in for the masked
 * InfiniBand LRH, then the IP header with its variant fields set to all
 * ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label,
 * hop limit), the UDP header with checksum 0xFFFF, the BTH with its byte 4
 * (FECN, BECN, resv6) set to 0xFF, and the rest of the packet up to the ICRC. */
#include <string.h>

#include "netio_native.h"

/* CRC-32 register after the 8 masked LRH bytes, from the all-ones start
 * (rxe_icrc.c seeds its CRC with the same value, 0xdebb20e3). */
#define ICRC_SEED_AFTER_LRH 0xdebb20e3u

int64_t netio_icrc(const uint8_t *pkt, size_t len) {
    uint8_t hdr[60 + 8 + 12]; /* largest IP header (IPv4 with options or IPv6 60/40) + UDP + BTH */
    size_t iphl;

    if (len < 1)
        return -1;
    switch (pkt[0] >> 4) {
    case 4:
        iphl = (size_t)(pkt[0] & 0xFu) * 4u;
        if (iphl < 20)
            return -1;
        break;
    case 6:
        iphl = 40;
        break;
    default:
        return -1;
    }
    size_t hl = iphl + 8 + 12;
    if (len < hl)
        return -1;
    memcpy(hdr, pkt, hl);
    if (iphl == 40 && (pkt[0] >> 4) == 6) {
        hdr[0] |= 0x0Fu; /* traffic class high nibble */
        hdr[1] = hdr[2] = hdr[3] = 0xFFu; /* traffic class low nibble + flow label */
        hdr[7] = 0xFFu; /* hop limit */
    } else {
        hdr[1] = 0xFFu; /* TOS: DSCP + ECN */
        hdr[8] = 0xFFu; /* TTL */
        hdr[10] = hdr[11] = 0xFFu; /* header checksum */
    }
    hdr[iphl + 6] = hdr[iphl + 7] = 0xFFu; /* UDP checksum */
    hdr[iphl + 8 + 4] = 0xFFu;             /* BTH FECN, BECN, resv6 */
    uint32_t crc = netio_crc32(~ICRC_SEED_AFTER_LRH, hdr, hl);
    crc = netio_crc32(crc, pkt + hl, len - hl);
    return (int64_t)crc;
}
