"""Analyse one triggered capture with the ``netio.analyze`` library.

The capture manager runs ``python -m netio.daemon.capture_analysis FILE`` as a
child process, so that a crash or a runaway in the analyser cannot take the
daemon down and is bounded by ``analyzer_timeout_s``.  It prints the analysis
document (``netio.analyze.engine.analyze`` with the default options, the same
document as ``netio-analyze --json``) and exits 0 whatever the capture holds
(a storm is a finding, not a failure); 1 when the analysis raised.
"""

from __future__ import annotations

import os
import sys

LIBRARY = "netio.analyze.engine"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m netio.daemon.capture_analysis CAPTURE\n")
        return 2
    # The analysis uses no BLAS: keep numpy's OpenBLAS from starting worker threads.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from netio.analyze.engine import analyze
    from netio.analyze.options import AnalysisOptions
    from netio.analyze.report import to_json

    try:
        doc = analyze(args, AnalysisOptions())
    except Exception as e:  # reported to the capture record as one line
        sys.stderr.write(f"analysis failed: {type(e).__name__}: {e}\n")
        return 1
    sys.stdout.write(to_json(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
