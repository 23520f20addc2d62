"""``netio decode CAPTURE``: one line per frame, like ``tcpdump -nn`` for RoCEv2 and PFC.

Each line shows the frame number (1-based), the time since the first frame,
the addresses, and the decoded RoCEv2 (opcode, dest QP, PSN, AckReq ``A``,
extension headers, payload bytes, ICRC verdict) or PFC/PAUSE content. A frame
cut by the capture's snap length shows ``payload=CAPTURED/CARRIED`` (e.g.
``payload=74/1024``) and no ICRC verdict.
``--summary`` prints only the per-opcode and per-kind counts.

Exit codes (netio.cli.exit_codes): 0 read to the end (or the --count
frames); 1 the capture is damaged (the frames before the damage were decoded,
the warning says where reading stopped); 2 the arguments are wrong; 3 the
file cannot be read as a capture (or has a link type netio does not read);
130 interrupted (Ctrl-C); 141 the reader of the output went away (``| head``),
as for a tool killed by SIGPIPE, without a message.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections import Counter
from typing import Any, TextIO

from netio.cli.arg_types import whole_number
from netio.cli.exit_codes import EXIT_CODES_HELP, ExitCode
from netio.errors import CaptureError, CaptureWarning, DecodeError
from netio.pcap import open_capture
from netio.pcap.format import SUPPORTED_LINKTYPES, unsupported_linktype
from netio.wire import Frame, decode_frame, format_mac
from netio.wire.bth import Opcode
from netio.wire.ext import AckType

EXIT_OK = ExitCode.OK
EXIT_DAMAGED = ExitCode.FOUND
EXIT_UNREADABLE = ExitCode.UNREADABLE
EXIT_INTERRUPTED = ExitCode.INTERRUPTED
EXIT_BROKEN_PIPE = ExitCode.BROKEN_PIPE

_positive = whole_number(1, unit="frames")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "decode", help="decode a capture frame by frame (RoCEv2, CNP, CM MADs, PFC, PAUSE)",
        description=__doc__, epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("capture", help="pcap or pcapng file")
    parser.add_argument("-c", "--count", type=_positive, default=None, metavar="N",
                        help="stop after N frames (N >= 1)")
    parser.add_argument("--summary", action="store_true",
                        help="print only the counts per opcode and frame kind")
    parser.add_argument("--no-icrc", action="store_true", help="skip ICRC verification")
    parser.set_defaults(func=run)


def describe(frame: Frame, *, check_icrc: bool = True) -> str:
    """One human line for a decoded frame (without number and time)."""
    if frame.pfc is not None:
        src = format_mac(frame.ethernet.src_mac) if frame.ethernet else "?"
        quanta = " ".join(f"p{p}={q}" for p, q in enumerate(frame.pfc.quanta)
                          if frame.pfc.enabled(p))
        return f"{src} PFC cev=0x{frame.pfc.class_enable_vector:02x} {quanta or '(none)'}"
    if frame.pause is not None:
        src = format_mac(frame.ethernet.src_mac) if frame.ethernet else "?"
        return f"{src} PAUSE quanta={frame.pause.quanta}"
    ip = frame.ip
    if ip is None:
        kind = f"ethertype 0x{frame.ethernet.ethertype:04x}" if frame.ethernet else "non-IP"
        return f"{kind} {len(frame.raw)} bytes"
    addrs = f"{ip.src_ip}:{frame.udp.src_port} > {ip.dst_ip}" if frame.udp else (
        f"{ip.src_ip} > {ip.dst_ip}")
    if frame.roce is None:
        return f"{addrs} non-RoCE {len(frame.payload)} bytes"
    roce = frame.roce
    bth = roce.bth
    parts = [addrs, f"qp=0x{bth.dest_qp:06x}", f"psn={bth.psn}"]
    if bth.ack_req:
        parts.append("A")
    parts.append(_opcode_name(bth.opcode))
    if bth.fecn or bth.becn:
        parts.append("FECN" if bth.fecn else "BECN")
    if roce.reth is not None:
        r = roce.reth
        parts.append(f"RETH(va=0x{r.virtual_address:x} rkey=0x{r.rkey:x} len={r.dma_length})")
    if roce.aeth is not None:
        parts.append(_aeth_text(roce.aeth))
    if roce.atomic_eth is not None:
        a = roce.atomic_eth
        parts.append(f"AtomicETH(va=0x{a.virtual_address:x} rkey=0x{a.rkey:x} "
                     f"add/swap={a.swap_add_data} cmp={a.compare_data})")
    if roce.atomic_ack_eth is not None:
        parts.append(f"orig={roce.atomic_ack_eth.original_remote_data}")
    if roce.imm_dt is not None:
        parts.append(f"ImmDt(0x{roce.imm_dt.immediate_data:08x})")
    if roce.ieth is not None:
        parts.append(f"IETH(rkey=0x{roce.ieth.rkey:x})")
    if roce.deth is not None:
        parts.append(f"DETH(qkey=0x{roce.deth.qkey:08x} srcqp=0x{roce.deth.src_qp:x})")
    if roce.mad is not None:
        mad = roce.mad
        attr = mad.cm_message.name if mad.cm_message is not None else f"0x{mad.attribute_id:04x}"
        parts.append(f"MAD(class=0x{mad.mgmt_class:02x} method=0x{mad.method:02x} attr={attr})")
    if frame.ecn is not None and frame.ecn == 3:
        parts.append("CE")
    parts.append(_payload_text(frame))
    if check_icrc:
        verdict = frame.icrc_ok()
        if verdict is False:
            parts.append("ICRC-BAD")
    return " ".join(parts)


def _payload_text(frame: Frame) -> str:
    """``payload=N``, or ``payload=N/M`` when the snap length kept N of the M bytes
    the packet carried (its IP length says M; the pad and the ICRC are not payload)."""
    n = len(frame.payload)
    if not frame.truncated or frame.roce is None:
        return f"payload={n}"
    payload_end = frame.l3_end - 4 - frame.roce.bth.pad_count
    captured = len(frame.raw)
    if captured >= payload_end:
        return f"payload={n}"
    return f"payload={n}/{payload_end - (captured - n)}"


def _opcode_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"opcode-0x{opcode:02x}"


def _aeth_text(aeth: Any) -> str:
    kind = aeth.ack_type
    if kind == AckType.ACK:
        return f"AETH(ACK {aeth.credit_count} msn={aeth.msn})"
    if kind == AckType.RNR_NAK:
        return f"AETH(RNR_NAK {aeth.rnr_timer_code} msn={aeth.msn})"
    if kind == AckType.NAK:
        # The numeric NAK code (IBTA Table 44: 0 = PSN sequence error) as rxe-lab's listing has it.
        return f"AETH(NAK {int(aeth.nak_code)} msn={aeth.msn})"
    return f"AETH(reserved syndrome 0x{aeth.syndrome:02x} msn={aeth.msn})"


def _kind(frame: Frame) -> str:
    if frame.pfc is not None:
        return "PFC"
    if frame.pause is not None:
        return "PAUSE"
    if frame.roce is not None:
        return _opcode_name(frame.roce.bth.opcode)
    return "other"


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    try:
        return _decode(args, out)
    except KeyboardInterrupt:
        print("netio decode: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if out is sys.stdout:
            # Nothing more can be written; keep the interpreter's final flush quiet too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return EXIT_BROKEN_PIPE


def _decode(args: argparse.Namespace, out: TextIO) -> int:
    counts: Counter[str] = Counter()
    bad_icrc = 0
    undecodable = 0
    damaged = False
    first_ts: int | None = None
    unsupported: Counter[int] = Counter()  # records per link type netio does not read
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        try:
            with open_capture(args.capture) as reader:
                for n, record in enumerate(reader, start=1):
                    if args.count is not None and n > args.count:
                        break
                    first_ts = record.ts_ns if first_ts is None else first_ts
                    rel_s = (record.ts_ns - first_ts) / 1e9
                    if record.linktype not in SUPPORTED_LINKTYPES:
                        unsupported[record.linktype] += 1  # said once, below
                        continue
                    try:
                        frame = decode_frame(record.frame, record.linktype,
                                             allow_truncated=True)
                    except DecodeError as exc:
                        undecodable += 1
                        counts["undecodable"] += 1
                        if not args.summary:
                            print(f"{n:6d} {rel_s:12.6f} undecodable: {exc}", file=out)
                        continue
                    counts[_kind(frame)] += 1
                    if not args.no_icrc and frame.icrc_ok() is False:
                        bad_icrc += 1
                    if not args.summary:
                        line = describe(frame, check_icrc=not args.no_icrc)
                        print(f"{n:6d} {rel_s:12.6f} {line}", file=out)
        except CaptureError as exc:
            print(f"netio decode: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        except BrokenPipeError:
            raise
        except OSError as exc:
            print(f"netio decode: {args.capture}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_UNREADABLE
    for warning in caught:
        damaged = damaged or issubclass(warning.category, CaptureWarning)
        print(f"netio decode: warning: {warning.message}", file=sys.stderr)
    if unsupported and not counts:
        lt = unsupported.most_common(1)[0][0]
        print(f"netio decode: {args.capture}: {unsupported_linktype(lt)}", file=sys.stderr)
        return EXIT_UNREADABLE
    for lt, n in sorted(unsupported.items()):
        print(f"netio decode: warning: {args.capture}: {n} frames skipped: "
              f"{unsupported_linktype(lt)}", file=sys.stderr)
    total = sum(counts.values())
    print(f"{total} frames, {bad_icrc} bad ICRC, {undecodable} undecodable", file=out)
    for name, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {name:36s} {count}", file=out)
    return EXIT_DAMAGED if damaged else EXIT_OK
