"""``parkbrake k8s render``: every Kubernetes object the stack declares, for review, GitOps and a server dry run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from cli.options import project_dir_option, stack_option


@click.command()
@stack_option
@click.option(
    "--parked/--unparked",
    default=None,
    help="Render the stack with the park switch flipped, without editing the file.",
)
@project_dir_option
@click.option(
    "--output",
    "-o",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="yaml: one document per object (kubectl apply -f -); json: one List of them.",
)
def render(*, stack: str, parked: bool | None, project_dir: Path, output: str) -> None:
    """Print every Kubernetes object the stack's program declares, from the same offline run as plan.

    No cluster is contacted. Objects come in the order to apply them: namespaces and RBAC, Karpenter's and
    Kueue's objects, then the workloads. Exit 2 for a bad config or a stack without parkbrake:kubernetes.

    \b
    Example:
      parkbrake k8s render --stack eks --parked \\
        | kubectl apply --server-side --dry-run=server -f -
    """
    from stacks.config import load_stack_config
    from stacks.kubernetes_config import kubernetes_config
    from stacks.kubernetes_objects import kubernetes_objects

    config = load_stack_config(stack, project_dir)
    kubernetes_config(config)  # refuses a stack that is not a Kubernetes stack, naming the section
    if parked is not None:
        config = config.with_parked(parked)
    objects = kubernetes_objects(config)
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
        return
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.explicit_start = True
    yaml.dump_all(objects, sys.stdout)
