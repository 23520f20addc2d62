"""The HTTP endpoints: ``/metrics``, ``/healthz`` (readiness), ``/livez`` (liveness),
``/api/profile``, ``/api/captures`` and ``/``; and the count of every answer
(``netio_http_requests_total``)."""

from __future__ import annotations

import json
from typing import Any, Protocol

from netio.daemon.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE
from netio.daemon.http import Handler, Request, Response
from netio.telemetry import metrics as m
from netio.telemetry.profile import FabricProfile, to_json_dict
from netio.telemetry.sample import Sample

INDEX = b"netio-daemon: /metrics /healthz /livez /api/profile /api/captures\n"


class Served(Protocol):
    """What the endpoints read from the daemon."""

    async def render_body(self, openmetrics: bool) -> bytes: ...

    def health_report(self) -> tuple[bool, dict[str, Any]]: ...

    def liveness(self) -> tuple[bool, dict[str, Any]]: ...

    def profile(self) -> FabricProfile: ...

    def captures(self) -> list[dict[str, Any]]: ...


def _json(code: int, doc: Any) -> Response:
    return Response(code, json.dumps(doc, indent=1).encode() + b"\n", "application/json")


class Api:
    def __init__(self, served: Served) -> None:
        self.served = served
        self.answers: dict[tuple[str, str], int] = {}  # (route, status code) -> count

    def routes(self) -> dict[str, Handler]:
        return {"/metrics": self._metrics, "/healthz": self._healthz, "/livez": self._livez,
                "/api/profile": self._profile, "/api/captures": self._captures,
                "/": self._index}

    def count(self, route: str, code: int) -> None:
        k = (route, str(code))
        self.answers[k] = self.answers.get(k, 0) + 1

    def samples(self) -> list[Sample]:
        return [Sample(m.SCRAPES, k, float(n)) for k, n in sorted(self.answers.items())]

    async def _metrics(self, req: Request) -> Response:
        om = "application/openmetrics-text" in req.headers.get("accept", "")
        body = await self.served.render_body(om)
        return Response(200, body, OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)

    async def _healthz(self, req: Request) -> Response:
        ok, doc = self.served.health_report()
        return _json(200 if ok else 503, doc)

    async def _livez(self, req: Request) -> Response:
        ok, doc = self.served.liveness()
        return _json(200 if ok else 503, doc)

    async def _profile(self, req: Request) -> Response:
        return _json(200, to_json_dict(self.served.profile()))

    async def _captures(self, req: Request) -> Response:
        return _json(200, self.served.captures())

    async def _index(self, req: Request) -> Response:
        return Response(200, INDEX)
