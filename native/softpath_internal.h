/* Internal interface between the soft data path's C files (not for cffi):
 * softpath.c's receive-slot helpers, used by softpingpong.c too. */
#ifndef NETIO_SOFTPATH_INTERNAL_H
#define NETIO_SOFTPATH_INTERNAL_H
#include "netio_native.h"

/* Where the UDP payload (BTH .. ICRC) of ring slot i starts, its length and
 * source; -1 when the slot is not a whole IPv4/UDP datagram to port 4791. */
int netio_sp_slot_payload(const netio_rx_ring *r, uint32_t i, const uint8_t **p, uint32_t *n,
                          uint32_t *src_ip, uint32_t *src_port);
/* 1 when the ICRC of the received packet p (BTH .. ICRC, n bytes) is right. */
int netio_sp_icrc_ok(const netio_rx_ring *r, const uint8_t *p, uint32_t n, uint32_t src,
                     uint32_t sport, uint32_t local_ip);

#endif
