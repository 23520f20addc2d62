"""SendWr checks what ``ibv_post_send`` callers may get wrong, with the same errors.

Limits from the specifications, written out here: IBTA vol 1 §9.4 (a message is at most
2**31 bytes), the 32-bit immediate (ImmDt) and R_Key, the 64-bit virtual address and
atomic operands (RETH, AtomicETH), atomics operate on exactly 8 bytes (§9.4.5), and
imm_data exactly for the *_WITH_IMM opcodes (``struct ibv_send_wr``).
"""

from __future__ import annotations

from typing import Any

import pytest

from netio.errors import RoceError
from netio.roce import Access, RoceEngine, SendWr, WrOpcode
from netio.roce.memory import Sge

IBV_WR_RDMA_WRITE = 0
U64_END = 2**64
U32_MAX = 2**32 - 1
IBTA_MAX_MESSAGE_BYTES = 2**31


def _sge(length: int, offset: int = 0) -> Sge:
    pd = RoceEngine("10.0.0.1").alloc_pd()
    mr = pd.register(bytearray(offset + length), Access.LOCAL_WRITE)
    return Sge(mr, offset, length)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"opcode": WrOpcode.SEND_WITH_IMM}, "SEND_WITH_IMM: imm_data must be given exactly "
                                         "for *_WITH_IMM"),
    ({"opcode": WrOpcode.SEND, "imm_data": 1}, "SEND: imm_data must be given exactly for "
                                               "*_WITH_IMM"),
    ({"opcode": WrOpcode.RDMA_WRITE_WITH_IMM, "imm_data": U32_MAX + 1},
     "imm_data does not fit 32 bits"),
    ({"opcode": WrOpcode.SEND_WITH_IMM, "imm_data": -1}, "imm_data does not fit 32 bits"),
    ({"compare_add": U64_END}, "compare_add does not fit 64 bits"),
    ({"swap": -1}, "swap does not fit 64 bits"),
    ({"remote_addr": U64_END}, "remote_addr does not fit 64 bits"),
    ({"rkey": U32_MAX + 1}, "rkey does not fit 32 bits"),
    ({"opcode": WrOpcode.ATOMIC_FETCH_AND_ADD, "sg_list": "4"},
     "ATOMIC_FETCH_AND_ADD: the local buffer must be exactly 8 bytes"),
    ({"opcode": WrOpcode.ATOMIC_CMP_AND_SWP, "sg_list": "4+4+4"},
     "ATOMIC_CMP_AND_SWP: the local buffer must be exactly 8 bytes"),
])
def test_each_invalid_field_is_refused_with_its_message(kwargs: dict[str, Any],
                                                        message: str) -> None:
    args: dict[str, Any] = {"opcode": WrOpcode.RDMA_WRITE, **kwargs}
    if isinstance(args.get("sg_list"), str):
        args["sg_list"] = tuple(_sge(int(n)) for n in args["sg_list"].split("+"))
    with pytest.raises(RoceError) as info:
        SendWr(1, **args)
    assert str(info.value) == message


def test_a_message_over_2_31_bytes_is_refused() -> None:
    # SendWr reads only each entry's length: no 2 GiB buffer is needed to state one
    class Big:
        length = IBTA_MAX_MESSAGE_BYTES // 2 + 1

    with pytest.raises(RoceError) as info:
        SendWr(1, WrOpcode.SEND, (Big(), Big()))  # type: ignore[arg-type]
    assert str(info.value) == f"message of {IBTA_MAX_MESSAGE_BYTES + 2} bytes exceeds 2**31"
    assert SendWr(1, WrOpcode.SEND, (Big(),)).length_bytes == Big.length  # type: ignore[arg-type]


@pytest.mark.parametrize("lengths", [(), (64,), (1, 2, 3), (4096, 0, 7)])
def test_length_is_the_sum_of_the_scatter_gather_list(lengths: tuple[int, ...]) -> None:
    wr = SendWr(1, WrOpcode.SEND, tuple(_sge(n) for n in lengths))
    assert wr.length_bytes == sum(lengths)


def test_opcode_given_as_the_libibverbs_number_is_accepted_and_kept() -> None:
    wr = SendWr(1, IBV_WR_RDMA_WRITE, (_sge(8),), remote_addr=U64_END - 1,  # type: ignore[arg-type]
                rkey=U32_MAX, compare_add=U64_END - 1, swap=0)
    assert wr.opcode == WrOpcode.RDMA_WRITE and wr.length_bytes == 8
    with pytest.raises(ValueError):
        SendWr(1, 99)  # type: ignore[arg-type]


def test_equal_requests_compare_equal() -> None:
    sge = _sge(16)
    assert SendWr(7, WrOpcode.SEND, (sge,)) == SendWr(7, WrOpcode.SEND, (sge,))
    assert SendWr(7, WrOpcode.SEND, (sge,)) != SendWr(8, WrOpcode.SEND, (sge,))
