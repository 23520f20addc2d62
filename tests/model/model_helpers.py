"""Shared inputs of the netio-model tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from netio.fabric_profile import SCHEMA_VERSION


def profile_doc() -> dict[str, Any]:
    return {
        "schema": "netio.fabric_profile", "version": SCHEMA_VERSION, "backend": "soft",
        "device": "rxe0", "gid": "fe80::1", "mtu_bytes": 4096, "hosts": ["a", "b"],
        "points": [{"message_bytes": 64, "latency_s": 5e-6, "bandwidth_bytes_per_s": 1e7},
                   {"message_bytes": 1 << 20, "latency_s": 2e-4,
                    "bandwidth_bytes_per_s": 5e9}],
        "fit": {"alpha_s": 4e-6, "beta_s_per_byte": 2e-10, "max_relative_error": 0.08},
        "efficiency": [{"message_bytes": 64, "efficiency": 0.01},
                       {"message_bytes": 1 << 20, "efficiency": 0.9}],
        "conditions": {"pause_fraction": 0.03, "cnp_per_s": 120.0,
                       "retransmission_ratio": 0.001},
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path
