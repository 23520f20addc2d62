"""Include/exclude selection by shell-style patterns (``mlx5_*``, ``rx_prio?_*``)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field


def _compile(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(fnmatch.translate(p) for p in patterns))


@dataclass(frozen=True)
class Selection:
    """A name is selected when it matches an include pattern and no exclude pattern.

    An empty include list selects everything.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _inc: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _exc: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_inc", _compile(self.include))
        object.__setattr__(self, "_exc", _compile(self.exclude))

    def __call__(self, name: str) -> bool:
        if self._inc is not None and self._inc.match(name) is None:
            return False
        return self._exc is None or self._exc.match(name) is None


ALL = Selection()
