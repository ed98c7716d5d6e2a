"""``parkbrake park`` and ``parkbrake unpark``: flip the stack's park switch, or (``--now``) act at once."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli.options import (
    ask_yes_no,
    confirm_or_abort,
    dry_run_option,
    organisation_options,
    output_option,
    project_dir_option,
    stack_option,
    wide_option,
    yes_option,
)
from guardrails.plurals import counted

if TYPE_CHECKING:
    from cli.oncall.organisation import OrganisationScope
    from cli.oncall.park.actions import ClusterBrake, EmergencyResult
    from cli.oncall.park.records import ParkedBy
    from cli.oncall.park.switch import ParkPlan


def _cluster_options() -> list[Callable[..., Any]]:
    """``k8s park``'s API-server options, for --now on a stack with a parkbrake:kubernetes section
    (without --server: the pod's own cluster, as the controller finds it)."""
    file = click.Path(exists=True, dir_okay=False, path_type=Path)
    return [
        click.option("--server", help="With --now on a Kubernetes stack: the API server's URL."),
        click.option("--token-file", type=file, help="With --server: a bearer token for it."),
        click.option(
            "--ca-file", type=file, help="With --server: the CA bundle that signed its certificate."
        ),
    ]


def _park_options(command: Callable[..., Any]) -> Callable[..., Any]:
    options: list[Callable[..., Any]] = [
        stack_option,
        project_dir_option,
        click.option(
            "--apply",
            is_flag=True,
            help="Then run `pulumi up` on the stack (Automation API; needs the Pulumi CLI).",
        ),
        click.option(
            "--now",
            is_flag=True,
            help="Emergency: act on AWS directly and at once (pools, services, nightly schedules, SSM) "
            "instead of editing the config.",
        ),
        click.option(
            "--region",
            help="With --now: the stack's region [default: aws:region of the stack file, else AWS_REGION].",
        ),
        click.option(
            "--force",
            is_flag=True,
            help="With unpark --now: restore the recorded capacities even where someone changed them "
            "since parking (shown as drift).",
        ),
        *_cluster_options(),
        dry_run_option,
        yes_option,
        output_option,
        wide_option,
        organisation_options,
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@_park_options
def park(**options: Any) -> None:
    """Park a stack: GPU pools and services to zero, nightly starts off, guardrails left running.

    By default this edits Pulumi.<stack>.yaml — only the value of parkbrake:parked changes — and
    shows what that does: the inputs Pulumi will change, the monthly cost before and after, what
    goes to zero and what stays on. Commit the file; --apply also runs `pulumi up`.

    --now is for emergencies: it scales every managed Auto Scaling group and ECS service of the
    stack to zero through the AWS API, disables the nightly start schedules (never the reaper's),
    sets the SSM park parameter, and records the capacities it took away in AWS (tags), so that
    anyone's `parkbrake unpark --now` restores them exactly. On a Kubernetes stack (a
    parkbrake:kubernetes section) it also sets the tenants' ClusterQueues to HoldAndDrain and
    deletes the stack's NodeClaims through the API server (--server, --token-file, --ca-file;
    in a pod, its own cluster), as `parkbrake k8s park --now` does.

    With --now and --accounts FILE or --org: the stack in every account and region (each
    account's regions, else the stack's), each parked the same way through the account's role
    (a role that may write); the plan first and one question unless --yes; an account without
    the stack is said so, a denied role is one line last (exit 1).

    \b
    Example:
      parkbrake park --stack dev --now --dry-run
    """
    _run(parked=True, **options)


@click.command()
@_park_options
def unpark(**options: Any) -> None:
    """Unpark a stack: the reverse of `parkbrake park`, with the same options.

    By default this sets parkbrake:parked: false in Pulumi.<stack>.yaml (and, with --apply, runs
    `pulumi up`). --now restores exactly what `park --now` recorded in AWS: each group's
    min/desired/max, each service's desired count, the nightly schedules it disabled; on a
    Kubernetes stack, each ClusterQueue's stopPolicy as it was before.

    \b
    Example:
      parkbrake unpark --stack dev --now
    """
    _run(parked=False, **options)


def _run(
    *,
    parked: bool,
    stack: str,
    project_dir: Path,
    apply: bool,
    now: bool,
    region: str | None,
    force: bool,
    server: str | None,
    token_file: Path | None,
    ca_file: Path | None,
    dry_run: bool,
    yes: bool,
    output: str,
    scope: OrganisationScope,
) -> None:
    cluster_options = {"--server": server, "--token-file": token_file, "--ca-file": ca_file}
    given = [name for name, value in cluster_options.items() if value is not None]
    _check_across(scope, now=now, given=given)
    if given and not now:
        raise click.UsageError(f"{given[0]} goes with --now on a Kubernetes stack (its API server)")
    if now and apply:
        raise click.UsageError(
            "--now acts on AWS directly; change the config with a separate run without --now"
        )
    if region and not now:
        raise click.UsageError("--region goes with --now; the config path uses the stack file's aws:region")
    if force and (parked or not now):
        raise click.UsageError(
            "--force goes with unpark --now: it restores records over capacities changed since"
        )
    if scope.spans_accounts:
        _run_across(scope, parked=parked, stack=stack, project_dir=project_dir, region=region, force=force,
                   dry_run=dry_run, yes=yes, output=output)  # fmt: skip
    elif now:
        _run_now(
            parked=parked,
            stack=stack,
            project_dir=project_dir,
            region=region,
            force=force,
            cluster=_cluster(
                stack, project_dir, given, server=server, token_file=token_file, ca_file=ca_file
            ),
            dry_run=dry_run,
            yes=yes,
            output=output,
        )
    else:
        _run_config(
            parked=parked,
            stack=stack,
            project_dir=project_dir,
            apply=apply,
            dry_run=dry_run,
            yes=yes,
            output=output,
        )


def _run_config(
    *, parked: bool, stack: str, project_dir: Path, apply: bool, dry_run: bool, yes: bool, output: str
) -> None:
    from cli.oncall.park.switch import apply_stack, plan_park, require_pulumi_cli, write_parked

    if apply and not dry_run:
        require_pulumi_cli()  # before anything changes
    plan = plan_park(stack, project_dir, parked=parked)
    if output == "text":
        _print_plan(plan)
    file_changed, applied = False, None
    if dry_run:
        _say(output, "Dry run: nothing written, nothing applied.")
    elif plan.changes_anything or apply:
        if not plan.changes_anything:
            _say(output, f"{plan.file.name} already says parked: {_word(parked)}; applying it to make sure.")
        question = (
            f"Set parkbrake:parked: {_word(parked)} in {plan.file.name}{' and run pulumi up' if apply else ''}?"
            if plan.changes_anything
            else f"Run pulumi up on stack {stack}?"
        )
        confirm_or_abort(question, assume_yes=yes)
        file_changed = write_parked(plan, dry_run=False).changed
        if file_changed:
            _say(output, f"Wrote parkbrake:parked: {_word(parked)} to {plan.file}; commit it.")
        if apply:
            applied = apply_stack(stack, project_dir, on_output=_pulumi_echo(output))
            _say(
                output,
                f"pulumi up done: {', '.join(f'{k} {v}' for k, v in sorted(applied.items())) or 'no changes'}",
            )
    else:
        _say(output, f"Stack {stack} is already {'parked' if parked else 'unparked'}; nothing to change.")
    if output == "json":
        document = {**plan.as_dict(), "dry_run": dry_run, "file_changed": file_changed, "applied": applied}
        click.echo(json.dumps(document, indent=2))


def _run_now(
    *,
    parked: bool,
    stack: str,
    project_dir: Path,
    region: str | None,
    force: bool,
    cluster: ClusterBrake | None,
    dry_run: bool,
    yes: bool,
    output: str,
) -> None:
    from cli.oncall.park.emergency import park_now, unpark_now
    from cli.oncall.park.switch import config_parked, stack_region
    from lambdas.clients import client

    region = stack_region(stack, project_dir, region)
    recorded = config_parked(stack, project_dir)
    act: Callable[..., EmergencyResult] = (
        partial(
            park_now,
            stack,
            region=region,
            clients=client,
            config_parked=recorded,
            parked_by=_parked_by(region),
            cluster=cluster,
        )
        if parked
        else partial(
            unpark_now, stack, region=region, clients=client, config_parked=recorded, cluster=cluster
        )
    )
    if not (dry_run or yes):
        preview = act(dry_run=True) if parked else act(dry_run=True, force=force)
        if output == "text":
            _print_emergency(preview)
        verb = "Park" if parked else "Unpark"
        drifted = [action for action in preview.actions if action.status == "drift"]
        if drifted and not force:
            force = _ask(
                f"{counted(len(drifted), 'resource')} changed since parking (drift, above). Restore the recorded "
                "capacities over them?"
            )
        confirm_or_abort(f"{verb} stack {stack} in {region} now, as listed?", assume_yes=False)
    result = act(dry_run=dry_run) if parked else act(dry_run=dry_run, force=force)
    if output == "json":
        click.echo(json.dumps(result.as_dict(), indent=2))
    else:
        _print_emergency(result)
    if result.failed:
        sys.exit(1)


def _check_across(scope: OrganisationScope, *, now: bool, given: list[str]) -> None:
    if scope.spans_accounts and (not now or given):
        raise click.UsageError(
            "--accounts and --org go with --now (each account's stack through the AWS API), without --server"
        )


def _run_across(
    scope: OrganisationScope, *, parked: bool, stack: str, project_dir: Path, region: str | None,
    force: bool, dry_run: bool, yes: bool, output: str,
) -> None:  # fmt: skip
    """``--now`` in every account and region of ``scope``: the preview, one question, then the acts;
    each place's table, then the places without the stack, then the failures; exit 1 on any."""
    from cli.oncall.organisation import organisation_run
    from cli.oncall.park.across import park_across
    from cli.oncall.park.switch import config_parked, stack_region
    from lambdas.clients import one_session_clients

    home = stack_region(stack, project_dir, region)
    run = organisation_run(scope, [home], one_session_clients())
    act = partial(park_across, run, stack, parked=parked, config_parked=config_parked(stack, project_dir),
                  parked_by=_parked_by(home) if parked else None, force=force)  # fmt: skip
    if not (dry_run or yes):
        _print_across(act(dry_run=True), "text", run.failures)
        confirm_or_abort(
            f"{'Park' if parked else 'Unpark'} stack {stack} in every account above now?", assume_yes=False
        )
    if _print_across(act(dry_run=dry_run), output, run.failures):
        sys.exit(1)


def _print_across(outcomes: list[Any], output: str, unlisted: list[str]) -> bool:
    """Each place's result (text or one JSON document), the failure lines last: ``unlisted`` (the
    accounts whose regions could not be listed) and the places that could not be read. True when
    anything failed."""
    from cli.oncall.organisation import account_failures, account_label, echo_failures, echo_wrapped

    answered = [outcome.value for outcome in outcomes if outcome.value is not None]
    errors = unlisted + account_failures(outcomes)
    if output == "json":
        document = {
            "places": [
                {"account": p.place.account_name, "account_id": p.place.account_id, "region": p.place.region,
                 **(p.result.as_dict() if p.result else {"absent": p.absent})}
                for p in answered
            ],
            "errors": errors,
        }  # fmt: skip
        click.echo(json.dumps(document, indent=2))
    else:
        for parking in answered:
            if parking.result is not None:
                _print_emergency(parking.result, account=account_label(parking.place))
        echo_wrapped(
            [
                f"{account_label(parking.place)} {parking.place.region}: not parked here: {parking.absent}"
                for parking in answered
                if parking.result is None
            ]
        )
        echo_failures(errors)
    return bool(errors) or any(parking.result is not None and parking.result.failed for parking in answered)


def _cluster(
    stack: str, project_dir: Path, given: list[str], *, server: str | None, token_file: Path | None,
    ca_file: Path | None,
) -> ClusterBrake | None:  # fmt: skip
    """A Kubernetes stack's brake on its cluster (exit 2 when its API server cannot be named); None for
    an AWS stack, which refuses the API-server options."""
    from cli.oncall.park.cluster import cluster_brake, is_kubernetes_stack

    if not is_kubernetes_stack(stack, project_dir):
        if given:
            raise click.UsageError(
                f"{given[0]} goes with a Kubernetes stack; Pulumi.{stack}.yaml has no parkbrake:kubernetes section"
            )
        return None
    from cli.k8s.check import kubernetes_stack
    from cli.k8s.server_options import api_from_options

    config, _ = kubernetes_stack(stack, project_dir)
    return cluster_brake(api_from_options(server, token_file, ca_file), config)


def _ask(question: str) -> bool:
    return sys.stdin.isatty() and ask_yes_no(question, default=False)


def _parked_by(region: str) -> ParkedBy:
    """Who is parking: the caller's ARN as STS reports it (recorded with the capacities)."""
    from datetime import UTC, datetime

    from botocore.exceptions import BotoCoreError, ClientError

    from cli.oncall.park.records import ParkedBy
    from lambdas.clients import client

    try:
        arn = str(client("sts", region).get_caller_identity()["Arn"])
    except (BotoCoreError, ClientError) as error:
        arn = f"unknown ({type(error).__name__})"
    return ParkedBy(arn, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _word(value: bool) -> str:
    return "true" if value else "false"


def _say(output: str, message: str) -> None:
    """Progress for people; in JSON mode it goes to stderr so stdout stays one document."""
    click.echo(message, err=output == "json")


def _pulumi_echo(output: str) -> Callable[[str], None]:
    return lambda line: click.echo(line.rstrip("\n"), err=output == "json")


def _print_plan(plan: ParkPlan) -> None:
    from rich.text import Text

    from cli.console import console as make_console
    from cli.table import Column, Table, print_table

    console = make_console()
    console.print(
        f"[bold]Stack {plan.stack}[/]: parked {_word(plan.parked_before)} → {_word(plan.parked_after)}  ({plan.file})"
    )
    if not plan.changes_anything:
        return
    saving = plan.monthly_before - plan.monthly_after
    monthly = (
        f"Monthly cost: ${plan.monthly_before:,.2f} → ${plan.monthly_after:,.2f} "
        f"({'saves' if saving >= 0 else 'adds'} ${abs(saving):,.2f})"
    )
    console.print(monthly)
    changes = Table(
        "What Pulumi will change",
        [Column("resource", 0), Column("input", 1, detail=True), Column("now", 0), Column("after", 0),
         Column("type", 3)],
    )  # fmt: skip
    for change in plan.changes:
        changes.add_row(
            change.name, change.input, str(change.before), str(change.after), Text(change.type, style="dim")
        )
    print_table(console, changes)
    costs = Table(
        "Monthly cost by item",
        [Column("item", 0), Column("now", 0, justify="right"), Column("after", 0, justify="right"),
         Column("kind", 1)],
    )  # fmt: skip
    for cost in plan.costs:
        costs.add_row(cost.name, f"${cost.before:,.2f}", f"${cost.after:,.2f}", cost.kind)
    print_table(console, costs)
    lists = (
        [("Goes to zero", plan.goes_to_zero), ("Switched off", plan.switched)]
        if plan.parked_after
        else [("Comes back", plan.comes_back), ("Switched on", plan.switched)]
    )
    for heading, items in [*lists, ("Stays on", plan.stays_on)]:
        console.print(f"[bold]{heading}:[/]" + ("" if items else " nothing"))
        for item in items:
            console.print(f"  • {item}", soft_wrap=True)
    # The answer again, last: the tables and lists above run over a screen.
    console.print(
        f"[bold]Stack {plan.stack}[/]: parked {_word(plan.parked_before)} → {_word(plan.parked_after)}; {monthly}"
    )


def _print_emergency(result: EmergencyResult, account: str | None = None) -> None:
    from rich.text import Text

    from cli.console import console as make_console
    from cli.table import Column, Table, print_table

    console = make_console()
    verb = "park --now" if result.parking else "unpark --now"
    where = f"{account} {result.region}" if account else result.region
    title = f"{verb} stack {result.stack} in {where}" + (
        " (dry run: nothing changed)" if result.dry_run else ""
    )
    table = Table(
        title, [Column("name", 0), Column("status", 0), Column("kind", 1), Column("change", 2, detail=True)]
    )
    colours = {
        "done": "green",
        "planned": "cyan",
        "unchanged": "dim",
        "skipped": "yellow",
        "failed": "bold red",
        "drift": "bold yellow",
    }
    for action in result.actions:
        status = Text(action.status, style=colours[action.status])
        change = action.change + (f"; {action.status}: {action.error}" if action.error else "")
        table.add_row(action.name, status, action.kind, change)
    print_table(console, table)
    for note in result.reconcile:
        console.print(f"[bold]Next pulumi up:[/] {note}")
    for line in _emergency_answer(result, verb, account):
        console.print(line)
    if result.failed:
        console.print(
            f"[bold red]{counted(len(result.failed), 'action')} failed or held back[/]; the others went ahead. "
            "Fix what their change says, then run the same command again."
        )


def _emergency_answer(result: EmergencyResult, verb: str, account: str | None = None) -> list[str]:
    """The answer, printed last (the table runs over a screen): how many resources changed or would
    change, of which kinds, and what the others were left as."""
    changing = Counter(action.kind for action in result.actions if action.status in ("done", "planned"))
    others = Counter(action.status for action in result.actions if action.status not in ("done", "planned"))
    did = "would change" if result.dry_run else "changed"
    lines = [
        f"[bold]{verb} {result.stack} ({f'{account} ' if account else ''}{result.region}):[/] "
        f"{changing.total()} of {len(result.actions)} "
        f"{did}" + ("; dry run, nothing changed" if result.dry_run else "")
    ]
    if changing:
        lines.append(f"  {did}: " + ", ".join(f"{count} {kind}" for kind, count in sorted(changing.items())))
    if others:
        lines.append("  left: " + ", ".join(f"{count} {status}" for status, count in sorted(others.items())))
    return lines
