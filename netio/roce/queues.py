"""Completion queues and shared receive queues of the soft engine (IBTA §10.2.9)."""

from __future__ import annotations

from collections import deque

from netio.api.types import Access
from netio.errors import RoceError
from netio.roce.memory import ProtectionDomain
from netio.roce.verbs import Completion, RecvWr


def check_recv_wr(wr: RecvWr) -> None:
    """Receive buffers must be registered with LOCAL_WRITE."""
    for sge in wr.sg_list:
        if not sge.mr.registered:
            raise RoceError(f"receive SGE lkey {sge.mr.lkey:#x} is not registered")
        if not sge.mr.access & Access.LOCAL_WRITE:
            raise RoceError(f"receive SGE lkey {sge.mr.lkey:#x} lacks LOCAL_WRITE")


class CompletionQueue:
    """A completion queue; read it with ``RoceEngine.poll_cq`` or ``poll``."""

    def __init__(self) -> None:
        self._entries: deque[Completion] = deque()

    def push(self, completion: Completion) -> None:
        self._entries.append(completion)

    def poll(self, max_entries: int = 16) -> list[Completion]:
        """Remove and return up to ``max_entries`` completions, oldest first."""
        entries = self._entries
        if not entries:  # polled after every post and every progress pass: usually empty
            return []
        out: list[Completion] = []
        while entries and len(out) < max_entries:
            out.append(entries.popleft())
        return out

    def __len__(self) -> int:
        return len(self._entries)


class SharedReceiveQueue:
    """A shared receive queue (IBTA §10.2.9.5): receives consumed by any attached QP."""

    def __init__(self, pd: ProtectionDomain) -> None:
        self.pd = pd
        self._wrs: deque[RecvWr] = deque()

    def post_recv(self, wr: RecvWr) -> None:
        check_recv_wr(wr)
        self._wrs.append(wr)

    def take(self) -> RecvWr | None:
        return self._wrs.popleft() if self._wrs else None

    def give_back(self, wr: RecvWr) -> None:
        self._wrs.appendleft(wr)

    def __len__(self) -> int:
        return len(self._wrs)
