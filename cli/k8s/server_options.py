"""The API server options of the ``k8s`` commands (``--server``, ``--token-file``, ``--ca-file``), and the
small client ``park`` and ``window`` build from them; the controller builds its lightkube client from
the same options (cli/k8s/kube.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from cli.k8s.api import KubernetesApi


def api_from_options(server: str | None, token_file: Path | None, ca_file: Path | None) -> KubernetesApi:
    """``--server`` (with its token and CA files), else the pod's own service account (``park``'s client)."""
    import os

    from cli.k8s.api import KubernetesApi

    if server is None:
        return KubernetesApi.in_cluster(os.environ)
    token = token_file.read_text().strip() if token_file else None
    return KubernetesApi(server, token=token, ca_file=str(ca_file) if ca_file else None)


server_options = [
    click.option("--server", help="The API server's URL (default: in a pod, the pod's cluster)."),
    click.option(
        "--token-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="A bearer token for --server (in a pod: the service account's).",
    ),
    click.option(
        "--ca-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The CA bundle that signed --server's certificate.",
    ),
]


def with_server_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(server_options):
        command = option(command)
    return command
