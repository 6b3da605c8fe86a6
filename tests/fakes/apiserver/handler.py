"""The fake API server's HTTP side: the Kubernetes REST routes over its store."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.apiserver.resources import (
    CONFIG_MAPS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    TOKEN,
    WITH_STATUS,
    ApiError,
    Obj,
    Recorded,
    Resource,
    status,
)
from tests.fakes.apiserver.selectors import Selector

if TYPE_CHECKING:
    from tests.fakes.apiserver.server import FakeApiServer

_CORE = re.compile(
    r"^/api/v1(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<sub>[a-z]+))?$"
)
_GROUP = re.compile(
    r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$"
)


class QuietServer(ThreadingHTTPServer):
    """Clients (the reflector shutting a watch down) reset connections: not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def handler_for(fake: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PUT(self) -> None:
            self._serve("PUT")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def _send(self, code: int, body: Obj, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            for header, value in (headers or {}).items():
                self.send_header(header, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Obj:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ApiError(400, f"the body is not JSON: {exc}") from exc
            if not isinstance(body, dict):
                raise ApiError(400, "the body is not a JSON object")
            return body

        def _serve(self, method: str) -> None:
            split = urlsplit(self.path)
            query = parse_qs(split.query)
            fake.record(Recorded(method, split.path, query))
            try:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    raise ApiError(401, "Unauthorized")
                fault = fake.take_fault(method, split.path)
                if fault is not None and not fault.after_apply:
                    if method in ("POST", "PUT", "PATCH"):
                        self._body()  # drain it so the connection stays usable
                    raise fault.error()
                code, body = self._route(method, split.path, query)
                if fault is not None:
                    raise fault.error()
                if body is not None:
                    self._send(code, body)
            except ApiError as exc:
                self._send(exc.code, exc.body(), exc.headers)

        def _route(
            self, method: str, path: str, query: dict[str, list[str]]
        ) -> tuple[int, Obj | None]:
            def arg(name: str) -> str | None:
                values = query.get(name)
                return values[0] if values else None

            if method == "GET" and path.startswith("/apis") and _GROUP.match(path) is None:
                return 200, fake.discovery(path)
            match = _CORE.match(path)
            if match is not None:
                plural, ns, name, sub = match.group("plural", "ns", "name", "sub")
                resource = {
                    "nodes": NODES,
                    "namespaces": NAMESPACES,
                    "pods": PODS,
                    "events": EVENTS,
                    "configmaps": CONFIG_MAPS,
                }.get(plural)
                if plural == "bindings" and ns and method == "POST" and not name:
                    body = self._body()
                    pod_name = (body.get("metadata") or {}).get("name", "")
                    return 201, fake.bind(ns, pod_name, body)
                if resource is None:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
            else:
                match = _GROUP.match(path)
                if match is None:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
                group, version, plural, ns, name, sub = match.group(
                    "group", "version", "plural", "ns", "name", "sub"
                )
                known = [
                    r
                    for r in fake.stored_kinds()
                    if (r.group, r.version, r.plural) == (group, version, plural)
                ]
                if not known:
                    raise ApiError(404, f"the server could not find the requested resource {path}")
                resource = known[0]
            namespace = ns if resource.namespaced else ""
            if sub == "binding" and method == "POST" and name and ns:
                return 201, fake.bind(ns, name, self._body())
            if sub == "eviction" and resource is PODS and method == "POST" and name and ns:
                dry_run = arg("dryRun") == "All"
                return 201, fake.evict(ns, name, self._body(), dry_run=dry_run)
            if sub == "status" and resource in WITH_STATUS and name is not None:
                if method == "GET":
                    return 200, fake.get(resource, namespace, name)
                if method == "PUT":
                    return 200, fake.replace_status(resource, namespace, name, self._body())
                if method == "PATCH":
                    content_type = self.headers.get("Content-Type") or ""
                    return 200, fake.patch(
                        resource, namespace, name, self._body(), content_type, "status"
                    )
            if sub is not None:
                raise ApiError(404, f"the server could not find the requested resource {path}")
            if method == "GET" and name is None:
                selector = Selector.parse(arg("fieldSelector"), arg("labelSelector"))
                selector.check_fields(resource)
                if arg("watch") in ("true", "1"):
                    self._watch(resource, ns, selector, arg, query)
                    return 200, None
                return 200, fake.list(resource, ns, selector)
            if method == "GET":
                return 200, fake.get(resource, namespace, name or "")
            if method == "POST" and name is None:
                return 201, fake.create(resource, self._body(), namespace=ns)
            if method == "PUT" and name is not None:
                return 200, fake.replace(resource, namespace, name, self._body())
            if method == "DELETE" and name is not None:
                fake.delete(resource, namespace, name)
                return 200, status(200, "", "")
            if method == "PATCH" and name is not None:
                content_type = self.headers.get("Content-Type") or ""
                return 200, fake.patch(resource, namespace, name, self._body(), content_type)
            raise ApiError(405, f"method {method} is not allowed on {path}", "MethodNotAllowed")

        def _watch(
            self,
            resource: Resource,
            namespace: str | None,
            selector: Selector,
            arg: Callable[[str], str | None],
            query: dict[str, list[str]],
        ) -> None:
            timeout_s = float(arg("timeoutSeconds") or 1800)
            resource_version = arg("resourceVersion")
            if resource_version and not resource_version.isdigit():
                raise ApiError(400, f'invalid resourceVersion "{resource_version}"')
            bookmarks = arg("allowWatchBookmarks") in ("true", "1")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for event in fake.watch_events(
                    resource, namespace, selector, resource_version, timeout_s, bookmarks
                ):
                    if event is None:  # dropped: no terminating chunk, the socket just closes
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    data = json.dumps(event).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.close_connection = True

    return Handler
