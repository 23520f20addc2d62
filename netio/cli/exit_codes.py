"""The one table of exit codes of every netio command (netio, netio-analyze, netio-daemon).

A code means the same thing whichever command returns it; each command's
``--help`` prints this table (``EXIT_CODES_HELP``) and says which of the
codes it can return.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    #: Done; nothing to report.
    OK = 0
    #: Done, and the input holds what the command alerts on (netio-analyze: a PFC or
    #: XON storm; netio decode: a damaged capture, decoded up to the damage).
    FOUND = 1
    #: Bad command line: unknown option, bad value, missing argument.
    USAGE = 2
    #: No input could be used: missing or unreadable file, not a capture, a link type
    #: netio does not read, an invalid scenario file.
    UNREADABLE = 3
    #: The command failed while running (an output that cannot be written, a RoCE
    #: operation that failed).
    FAILED = 4
    #: Interrupted (Ctrl-C, SIGINT): 128 + 2.
    INTERRUPTED = 130
    #: The reader of the output went away (``| head``): 128 + SIGPIPE, without a message.
    BROKEN_PIPE = 141


_MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "done; nothing to report",
    ExitCode.FOUND: "done, and found what the command alerts on (netio-analyze: a PFC or "
                    "XON storm; netio decode: a damaged capture, decoded up to the damage)",
    ExitCode.USAGE: "bad command line (unknown option, bad value, missing argument)",
    ExitCode.UNREADABLE: "no input could be used (missing or unreadable file, not a "
                         "capture, unsupported link type, invalid scenario file)",
    ExitCode.FAILED: "failed while running (output not writable, RoCE operation failed)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    ExitCode.BROKEN_PIPE: "the reader of the output went away (| head), as SIGPIPE would",
}


def meaning(code: ExitCode) -> str:
    return _MEANING[code]


#: The table as ``--help`` text.
EXIT_CODES_HELP = "Exit codes (the same for every netio command):\n" + "\n".join(
    f"  {int(c):3d}  {_MEANING[c]}" for c in ExitCode)


__all__ = ["EXIT_CODES_HELP", "ExitCode", "meaning"]
