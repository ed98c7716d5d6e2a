"""``parkbrake guard-policy``: the preventive policy that keeps accelerator hosts inside the guardrails."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli.options import output_option, stack_option

ROLE_ARN_PREFIX = "arn:"


@click.command("guard-policy")
@stack_option
@click.option(
    "--deployer-role",
    "deployer_roles",
    multiple=True,
    metavar="ARN",
    help="A role that may also edit parkbrake:* tags (the one that runs `pulumi up`); repeatable.",
)
@click.option(
    "--extender-role",
    "extender_roles",
    multiple=True,
    metavar="ARN",
    help="A role people run `parkbrake extend` as: it may set the extension's tags (parkbrake:exempt-until "
    "and parkbrake:extended-*) and no other parkbrake:* tag; * wildcards allowed; repeatable.",
)
@click.option(
    "--document",
    type=click.Choice(["both", "scp", "boundary"]),
    default="both",
    show_default=True,
    help="Print one policy document alone, ready for `aws organizations create-policy --content` "
    "or `aws iam create-policy --policy-document`.",
)
@click.option(
    "--project-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Folder holding the stack files.",
)
@output_option
def guard_policy(
    *,
    stack: str,
    deployer_roles: tuple[str, ...],
    extender_roles: tuple[str, ...],
    document: str,
    project_dir: Path,
    output: str,
) -> None:
    """Print the preventive policy that keeps accelerator hosts inside the guardrails.

    A service control policy, and the same statements as a permissions boundary, that deny launching
    accelerator hosts without parkbrake:managed=true and a parkbrake:max-runtime tag, and deny editing
    parkbrake:* tags except by the stack's own roles (and the extenders, for the extension's tags
    only). docs/guardrails.md says how to attach them; docs/owners.md, who may extend.

    \b
    Example:
      parkbrake guard-policy --stack prod --document scp > parkbrake-scp.json
    """
    from guardrails.errors import InputError
    from guardrails.guard_policy import permissions_boundary, service_control_policy
    from stacks.config import load_stack_config

    config = load_stack_config(stack, project_dir)  # the stack must exist and be valid
    ceiling = config.guardrails.max_runtime_ceiling
    for option, roles in (("--deployer-role", deployer_roles), ("--extender-role", extender_roles)):
        bad = [arn for arn in roles if not arn.startswith(ROLE_ARN_PREFIX) or ":role/" not in arn]
        if bad:
            raise InputError(f"{option}: {', '.join(bad)} is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
    documents = {
        "scp": service_control_policy(stack, deployer_roles, extender_roles, ceiling),
        "boundary": permissions_boundary(stack, deployer_roles, extender_roles, ceiling),
    }
    if document != "both":
        click.echo(_policy_text(documents[document]))
        return
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "stack": stack,
                    "service_control_policy": documents["scp"],
                    "permissions_boundary": documents["boundary"],
                },
                indent=2,
            )
        )
        return
    click.echo(f"# Service control policy for stack {stack} (attach to the account or OU):")
    click.echo(_policy_text(documents["scp"]))
    click.echo(
        f"\n# Permissions boundary for stack {stack} (attach to the roles and users that launch hosts):"
    )
    click.echo(json.dumps(documents["boundary"], indent=2))


def _policy_text(policy: dict[str, object]) -> str:
    """Indented when that fits AWS Organizations' size limit, else compact: submitted through the API or
    the CLI, an SCP's whitespace counts against the 5,120 characters (the duration patterns of a
    long ceiling need the room)."""
    from guardrails.guard_policy import SCP_SIZE_LIMIT

    indented = json.dumps(policy, indent=2)
    return indented if len(indented) <= SCP_SIZE_LIMIT else json.dumps(policy, separators=(",", ":"))
