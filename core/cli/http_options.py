"""``kubesage serve``'s HTTP limits and timeouts as command-line options.

Each is an ``Annotated`` type (its flag, bound and help written once) for a field of
the server's :class:`~kubesage.core.k8s.http_limits.HttpLimits`; the defaults are
that class's.
"""

from __future__ import annotations

from typing import Annotated

import typer

MaxUrlBytesOption = Annotated[
    int,
    typer.Option("--max-url-bytes", min=1, help="Longest request URL; longer ones get 414."),
]
MaxHeaderBytesOption = Annotated[
    int,
    typer.Option(
        "--max-header-bytes", min=1, help="Most bytes of header fields per request; more: 431."
    ),
]
MaxHeadersOption = Annotated[
    int,
    typer.Option("--max-headers", min=1, help="Most header fields per request; more: 431."),
]
HeaderTimeoutOption = Annotated[
    float,
    typer.Option(
        "--header-timeout-s",
        min=0.001,
        help="Seconds from a request's first byte to its last header; slower: 408.",
    ),
]
KeepAliveOption = Annotated[
    float,
    typer.Option(
        "--keep-alive-s",
        min=0.001,
        help="Seconds an idle connection is kept open: keep it above the clients' own idle "
        "time (90 s for kube-scheduler and the API server), so they close first.",
    ),
]
StallTimeoutOption = Annotated[
    float,
    typer.Option(
        "--stall-timeout-s",
        min=0.001,
        help="Seconds a request body may send nothing (then 408), or a client read none of "
        "its answers (then dropped).",
    ),
]
