/* netio's optional native verbs data path (netio._verbs_native).
 *
 * ibv_post_send, ibv_post_recv and ibv_poll_cq are static inline functions in
 * <infiniband/verbs.h> (they jump through qp->context->ops), so libibverbs.so.1
 * does not export them and ctypes or cffi's ABI mode cannot call them. This
 * module is compiled against the header instead. It takes flat arrays from
 * Python, builds the linked list of work requests in C and posts it with one
 * call (one doorbell), and polls many completions into flat arrays.
 *
 * pyverbs keeps the control path (device, PD, MR, CQ, QP creation and state
 * changes). pyverbs 44 does not give Python the struct ibv_qp pointer, so
 * netio_verbs_find_qp finds it inside the pyverbs QP object and checks it
 * against the ibverbs ABI before anything uses it.
 *
 * Declarations between CDEF BEGIN/END are read by netio/_verbs_ffi_build.py
 * for cffi, so they must stay plain C (no macros, no verbs.h types). */
#ifndef NETIO_VERBS_H
#define NETIO_VERBS_H
#include <stddef.h>
#include <stdint.h>

/* CDEF BEGIN */
/* The struct ibv_qp pointer held inside a pyverbs QP object (obj_addr is
 * id(qp), obj_bytes type(qp).__basicsize__). Every pointer-sized word of the
 * object is a candidate; a candidate is read through process_vm_readv (an
 * unmapped address fails with EFAULT instead of crashing) and accepted when
 * its qp_num and qp_type are the expected ones, it has a context, a PD of that
 * context and send and receive CQs of that context. Returns the number of
 * accepted candidates (the caller uses the pointers only when it is 1) and
 * stores the QP and its send and receive CQs; a negative errno when memory
 * cannot be read at all. */
int netio_verbs_find_qp(uintptr_t obj_addr, size_t obj_bytes, uint32_t qp_num,
                        uint32_t qp_type, uintptr_t *qp_out, uintptr_t *send_cq_out,
                        uintptr_t *recv_cq_out);
/* Post n send work requests as one linked list (ibv_post_send). Request i
 * uses num_sge[i] consecutive entries of the sge_* arrays. opcode is enum
 * ibv_wr_opcode, flags enum ibv_send_flags, imm_be the immediate data already
 * in network byte order. remote_addr/rkey are used by RDMA and atomic
 * opcodes, compare_add/swap by atomics. Returns 0, or ibv_post_send's error
 * (an errno) with *bad_index set to the first request not posted. */
int netio_verbs_post_send(uintptr_t qp, int n, const uint64_t *wr_id,
                          const uint32_t *opcode, const uint32_t *flags,
                          const uint64_t *remote_addr, const uint32_t *rkey,
                          const uint32_t *imm_be, const uint64_t *compare_add,
                          const uint64_t *swap, const uint32_t *num_sge,
                          const uint64_t *sge_addr, const uint32_t *sge_len,
                          const uint32_t *sge_lkey, int *bad_index);
/* Post n receive work requests as one linked list (ibv_post_recv). */
int netio_verbs_post_recv(uintptr_t qp, int n, const uint64_t *wr_id,
                          const uint32_t *num_sge, const uint64_t *sge_addr,
                          const uint32_t *sge_len, const uint32_t *sge_lkey,
                          int *bad_index);
/* Poll up to max completions (ibv_poll_cq) into the flat arrays; returns how
 * many, or a negative value when ibv_poll_cq fails. imm_be stays in network
 * byte order, as struct ibv_wc holds it. */
int netio_verbs_poll_cq(uintptr_t cq, int max, uint64_t *wr_id, uint32_t *status,
                        uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                        uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags);
/* Busy-poll n_cq CQs in turn (as perftest does) until one returns completions,
 * spin_ns nanoseconds have passed, or one of the n_fd descriptors in fds is readable
 * (checked now and then with poll(2); at most 64 are looked at): up to max completions
 * of that CQ go to the flat arrays and *which names it. Returns how many (0 when the
 * time ran out or a descriptor became readable), or -1 when ibv_poll_cq failed on CQ
 * *which. An event loop calls it before it would sleep, so a completion that comes
 * soon costs no completion-channel wake-up, and its other descriptors are not kept
 * waiting. */
int netio_verbs_spin_cq(const uintptr_t *cqs, int n_cq, const int *fds, int n_fd,
                        int64_t spin_ns, int max,
                        int *which, uint64_t *wr_id, uint32_t *status, uint32_t *opcode,
                        uint32_t *byte_len, uint32_t *imm_be, uint32_t *qp_num,
                        uint32_t *src_qp, uint32_t *wc_flags);
/* One step of a ping-pong in one call: post n_recv receives (as netio_verbs_post_recv),
 * then n_send send requests (as netio_verbs_post_send), then busy-poll cq until the
 * completion of want_wr_id or an error completion has been polled, spin_ns have passed,
 * or max completions are in the arrays. Returns how many completions were polled (want_wr_id's among them, or
 * not when the time ran out); -1 when ibv_poll_cq failed; -2 when a post failed, with
 * *post_rc its errno, *post_which 1 (receives) or 2 (sends) and *bad_index the first
 * request not posted. want_wr_id 0 waits for nothing (post only). */
int netio_verbs_post_poll(uintptr_t qp, uintptr_t cq, int n_recv, const uint64_t *recv_wr_id,
                          const uint32_t *recv_num_sge, const uint64_t *recv_sge_addr,
                          const uint32_t *recv_sge_len, const uint32_t *recv_sge_lkey,
                          int n_send, const uint64_t *wr_id_in, const uint32_t *opcode_in,
                          const uint32_t *flags, const uint64_t *remote_addr,
                          const uint32_t *rkey, const uint32_t *imm_in,
                          const uint64_t *compare_add, const uint64_t *swap,
                          const uint32_t *num_sge, const uint64_t *sge_addr,
                          const uint32_t *sge_len, const uint32_t *sge_lkey,
                          uint64_t want_wr_id, int64_t spin_ns, int max, int *post_rc,
                          int *post_which, int *bad_index, uint64_t *wr_id,
                          uint32_t *status, uint32_t *opcode, uint32_t *byte_len,
                          uint32_t *imm_be, uint32_t *qp_num, uint32_t *src_qp,
                          uint32_t *wc_flags);
/* A whole SEND ping-pong in C, as ib_send_lat runs it, on a QP with nothing else
 * outstanding. recv_* is one receive (wr_id recv_wr_id), send_* one send request whose
 * flags are used as given except for IBV_SEND_SIGNALED: set on every signal_every-th
 * SEND and on the last, which carries last_wr_id instead of its wr_id. The initiator
 * (initiator 1) posts the receive for the answer and the SEND, then polls until the
 * answer arrives, count times, and stores each step's duration in t_ns[i]; the other
 * side (first: 0 posts its first receive and waits for the first ping, 1 only waits,
 * 2 has it already) then for each ping posts the receive for the next (none after the
 * last) and the answer. Both wait for the last SEND's completion,
 * so nothing of theirs is left outstanding. Each wait busy-polls for at most spin_ns.
 * Returns 0; -1 when ibv_poll_cq failed; -2 when a post failed (*post_rc its errno);
 * -3 when a wait ran out of time; 1 when a completion came with an error status or an
 * unknown wr_id (it is in the arrays at index 0); *steps says how many steps finished. */
int netio_verbs_pingpong(uintptr_t qp, uintptr_t cq, int initiator, int first, int count,
                         int signal_every, uint64_t recv_wr_id, uint64_t recv_sge_addr,
                         uint32_t recv_sge_len, uint32_t recv_sge_lkey, uint64_t send_wr_id,
                         uint64_t last_wr_id, uint32_t send_opcode, uint32_t send_flags,
                         uint64_t send_sge_addr, uint32_t send_sge_len,
                         uint32_t send_sge_lkey, int64_t spin_ns, int64_t *t_ns,
                         int *steps, int *post_rc, uint64_t *wr_id, uint32_t *status,
                         uint32_t *opcode, uint32_t *byte_len, uint32_t *imm_be,
                         uint32_t *qp_num, uint32_t *src_qp, uint32_t *wc_flags);
/* sizeof(struct ibv_send_wr), sizeof(struct ibv_wc), offsetof(struct ibv_qp,
 * qp_num): the header this module was compiled against, for tests. */
size_t netio_verbs_abi(int what);
/* CDEF END */

#endif
