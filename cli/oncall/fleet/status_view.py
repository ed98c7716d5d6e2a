"""``parkbrake status`` for people: a summary first, then tables sorted by what needs action.

Filtering and sorting are plain functions over the :class:`FleetStatus` the AWS reads produced, so
the JSON output and the text output show the same hosts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from rich.console import Console
from rich.markup import escape

from cli.oncall.fleet.status import FleetStatus, HostStatus, StackStatus
from cli.table import Column, Table, print_table
from guardrails import names, tags
from guardrails.durations import format_duration
from guardrails.errors import InputError
from guardrails.owners import owner_of
from guardrails.plurals import counted

HOST_STATES = ("overdue", "unmanaged", "bad-tags", "running", "exempt")  # in the order they need action
FILTERS: dict[str, Callable[[HostStatus], str | None]] = {
    "tenant": lambda host: host.host.tenant,
    "pool": lambda host: host.host.pool,
    "state": lambda host: host.state,
    "stack": lambda host: host.host.tags.get(tags.STACK),
    "region": lambda host: host.host.region,
    "type": lambda host: host.host.instance_type,
}
SORTS: dict[str, Callable[[HostStatus], Any]] = {
    "action": lambda host: (HOST_STATES.index(host.state), _seconds_left(host), host.host.instance_id),
    "cost": lambda host: (-(host.usd_per_hour or 0), host.host.instance_id),
    "age": lambda host: (-host.age.total_seconds(), host.host.instance_id),
    "deadline": lambda host: (_seconds_left(host), host.host.instance_id),
    "tenant": lambda host: (host.host.tenant or "", host.host.instance_id),
    "pool": lambda host: (host.host.pool or "", host.host.instance_id),
    "id": lambda host: host.host.instance_id,
}
STATE_STYLES = {"overdue": "red", "unmanaged": "yellow", "bad-tags": "yellow"}
TIMESTAMP = "%m-%d %H:%M"


def parse_filters(texts: Sequence[str]) -> dict[str, set[str]]:
    """``KEY=VALUE`` filters: values of one key are alternatives, different keys must all hold."""
    wanted: dict[str, set[str]] = {}
    errors = []
    for text in texts:
        key, _, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if key not in FILTERS or not value:
            errors.append(f"--filter {text!r}: use KEY=VALUE with KEY one of {', '.join(FILTERS)}")
        elif key == "state" and value not in HOST_STATES:
            errors.append(f"--filter {text!r}: state is one of {', '.join(HOST_STATES)}")
        else:
            wanted.setdefault(key, set()).add(value)
    if errors:
        raise InputError("; ".join(errors))
    return wanted


# The keys a pool and a stack carry themselves; for any other key (a pool has no state, a stack no
# tenant) one is shown when it holds a selected host. Services carry only stack and region: a filter by
# tenant, pool, state or type leaves them out, as hosts of no tenant.
GROUP_KEYS = ("tenant", "pool", "stack", "region")
STACK_KEYS = SERVICE_KEYS = ("stack", "region")


def select(report: FleetStatus, filters: dict[str, set[str]], sort: str | None) -> FleetStatus:
    """The report narrowed by the filters, every table alike (hosts, pools, stopped hosts, services,
    stacks, the ledger's tenants); hosts in ``sort`` order if given."""
    hosts = [
        host for host in report.hosts if all(FILTERS[key](host) in values for key, values in filters.items())
    ]
    holding = {(host.host.region, host.host.autoscaling_group) for host in hosts}
    groups = [
        group
        for group in report.groups
        if all(
            getattr(group, key) in values if key in GROUP_KEYS else (group.region, group.name) in holding
            for key, values in filters.items()
        )
    ]
    services = [
        service
        for service in report.services
        if all(key in SERVICE_KEYS and getattr(service, key) in values for key, values in filters.items())
    ]
    shown_stacks = {(host.host.region, host.host.tags.get(tags.STACK)) for host in hosts} | {
        (group.region, group.stack) for group in groups
    }
    stacks = [
        stack
        for stack in report.stacks
        if all(
            getattr(stack, key) in values
            if key in STACK_KEYS
            else (stack.region, stack.stack) in shown_stacks
            for key, values in filters.items()
        )
    ]
    # The ledger's rows are per tenant: under any filter, only the tenants of the hosts shown (so a
    # filter that matches no host leaves no "By tenant" table of budgets alone).
    tenants = {host.host.tenant or "(untagged)" for host in hosts}
    ledger = (
        [row for row in report.ledger if row.tenant in tenants]
        if report.ledger is not None and filters
        else report.ledger
    )
    # A stopped host has no running state: a state filter shows none of them.
    stopped = [
        stopped
        for stopped in report.stopped
        if "state" not in filters
        and all(FILTERS[key](HostStatus(stopped.host, None, None, None, report.now)) in values
                for key, values in filters.items())
    ]  # fmt: skip
    return replace(
        report,
        hosts=sorted(hosts, key=SORTS[sort]) if sort else hosts,
        groups=groups,
        stopped=stopped,
        services=services,
        stacks=stacks,
        ledger=ledger,
    )


def _seconds_left(host: HostStatus) -> float:
    left = host.time_left
    return float("inf") if left is None else left.total_seconds()


def _span(duration: timedelta) -> str:
    """A duration for people: to the second under a minute, else to the minute."""
    seconds = int(duration.total_seconds())
    if seconds >= 60:
        seconds -= seconds % 60
    return format_duration(timedelta(seconds=seconds)) if seconds > 0 else "0s"


def _money(value: Any) -> str:
    # The ledger's amounts arrive as exact decimal strings, the fleet's own as numbers.
    return "?" if value is None else f"{Decimal(str(value)):,.2f}"


def print_status(
    console: Console, report: FleetStatus, *, filters: Sequence[str] = (), running: int | None = None
) -> None:
    """The summary first, the tables, and the answer again last: a fleet's tables are over a screen,
    and the last 24 lines are what a terminal still shows when the command returns.

    ``running`` counts the hosts before ``filters`` narrowed ``report``: what "no host matches" says
    there is.
    """
    scope = f" ({', '.join(filters)})" if filters else ""
    accounts = "" if report.accounts is None else f"{report.accounts:,} accounts × "
    header = (
        f"[bold]GPU fleet{scope}[/] in {accounts}{', '.join(report.regions)} "
        f"at {report.now:%Y-%m-%d %H:%M} UTC"
    )
    console.print(header)
    if filters and not report.hosts:
        # Nothing matched: one line saying so (and what there is), not a summary of zeros and empty tables.
        answer = [
            f"no host matches {escape(', '.join(filters))} ({running if running is not None else '?'} running)"
        ]
        console.print(answer[0])
    else:
        answer = _summary_lines(report)
        for line in answer:
            console.print(line)
        for stack in report.stacks:
            console.print(f"  {_alarms_line(stack, several_regions=len(report.regions) > 1)}")
    # The errors (exit 1) once, last: the exit reason belongs on the last screen.
    errors = [f"[bold red]error:[/] {error}" for error in report.errors]
    printed = [
        _print_hosts(console, report, quiet=bool(filters)),
        _print_stopped(console, report),
        _print_groups(console, report),
        _print_services(console, report),
        _print_stacks(console, report),
        _print_tenants(console, report),
    ]
    if any(printed):
        console.print()
        console.print(header)
        for line in answer:
            console.print(line)
        for stack in report.stacks:  # only the alarm lines that need action (coloured): the rest are above
            line = _alarms_line(stack, several_regions=len(report.regions) > 1)
            if line.startswith(("[yellow]", "[red]")):
                console.print(f"  {line}")
    for line in errors:
        console.print(line)


def _summary_lines(report: FleetStatus) -> list[str]:
    """Hosts and accelerators, what needs action, the burn and the parked stacks."""
    summary = report.summary()
    needs = [
        f"[red]{summary['overdue']} overdue[/]" if summary["overdue"] else "0 overdue",
        f"[yellow]{summary['unmanaged']} unmanaged[/]" if summary["unmanaged"] else "0 unmanaged",
    ]
    if summary["bad_tags"]:
        needs.append(f"[yellow]{summary['bad_tags']} with bad tags[/]")
    needs.append(f"{summary['exempt']} exempt")
    parked = ", ".join(summary["parked_stacks"]) or "none"
    lines = [
        f"  hosts {summary['hosts']:,} · accelerators {summary['accelerators']:,} · {' · '.join(needs)}",
        f"  burn ${_money(summary['usd_per_hour'])}/h · spent today ${_money(summary['spent_today_usd'])} · "
        f"parked stacks {parked} (of {summary['stacks']})",
    ]
    if summary["unmanaged"]:
        lines.append(
            f"  [yellow]unmanaged hosts burn ${_money(summary['unmanaged_usd_per_hour'])}/h: "
            "no guardrail may stop them[/]"
        )
    organisation = _organisation_line(report)
    if organisation:
        lines.append(f"  [yellow]{escape(organisation)}[/]")
    return lines


def _organisation_line(report: FleetStatus) -> str | None:
    """Which stacks' nightly starts an organisation's park switch refuses, and whose switch it is:
    their own switches may say "no" while every start is refused."""
    parked = [stack for stack in report.stacks if stack.organisation]
    if not parked:
        return None
    hubs = sorted({switch.hub for stack in parked for switch in stack.organisation})
    places = sorted({(stack.account or "", stack.region) for stack in parked})
    where = (
        ", ".join(sorted({region for _, region in places}))
        if report.accounts is None
        else counted(len(places), "account-region")
    )
    return (
        f"organisation parked (hub {', '.join(hubs)}): nightly starts refused for "
        f"{counted(len(parked), 'stack')} in {where}"
    )


def _alarms_line(stack: StackStatus, *, several_regions: bool) -> str:
    """Who the stack's alarms reach: an address still pending confirmation receives nothing yet."""
    where = f"alarms {stack.stack}" + (f" ({stack.region})" if several_regions else "")
    alarms = stack.alarms
    if alarms is None or alarms.error:
        return f"[yellow]{where}: subscriptions unknown (see the error below)[/]"
    if alarms.arn is None:
        return (
            f"[yellow]{where}: no topic {names.alarm_topic(stack.stack)} (nor guardrails.alarm_topic_arn in "
            f"Pulumi.{stack.stack}.yaml here): alarms may reach nobody[/]"
        )
    emails = alarms.emails
    if not emails:
        return f"[yellow]{where}: no e-mail subscribed to {escape(alarms.arn.rsplit(':', 1)[-1])}[/]"
    # Addresses come from whoever subscribed them: escaped, so a bracket is text, not rich markup.
    listed = ", ".join(f"{escape(email.endpoint)} {email.state}" for email in emails)
    if all(email.confirmed for email in emails):
        return f"{where} → {listed}"
    if any(email.confirmed for email in emails):
        return f"[red]{where} → {listed}: an unconfirmed address gets no alarm[/]"
    return f"[red]{where} → {listed}: nobody is paged until an address confirms[/]"


def _print(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    styles: Sequence[str | None] | None = None,
) -> None:
    table = Table(title, columns)
    for position, row in enumerate(rows):
        table.add_row(*row, style=styles[position] if styles else None)
    print_table(console, table)


def _print_hosts(console: Console, report: FleetStatus, *, quiet: bool) -> bool:
    """The hosts table; without hosts a line saying so, or (``quiet``: "no host matches" said it) nothing."""
    if not report.hosts:
        if not quiet:
            console.print("No GPU hosts running.")
        return False
    several_regions = len(report.regions) > 1
    columns = [
        Column("instance", 0),
        *([Column("account", 0)] if report.accounts is not None else []),
        Column("state", 0),
        Column("left", 1, justify="right"),
        Column("tenant", 2),
        Column("deadline UTC", 4),
        Column("stack/pool", 5),
        Column("$/h", 1, justify="right"),
        Column("type", 6),
        Column("GPUs", 7, justify="right"),
        Column("age", 8, justify="right"),
        Column("so far $", 3, justify="right"),
        *([Column("region", 2)] if several_regions else []),
    ]
    rows = [_host_row(host, several_regions, accounts=report.accounts is not None) for host in report.hosts]
    styles = [STATE_STYLES.get(host.state) for host in report.hosts]
    title = f"GPU hosts ({len(rows):,}), most urgent first"
    _print(console, title, columns, rows, styles)
    return True


def _host_row(host: HostStatus, several_regions: bool, *, accounts: bool = False) -> list[str]:
    facts, deadline, left = host.host, host.deadline, host.time_left
    if deadline is None or left is None:
        left_text, deadline_text = "-", "-"
    else:
        deadline_text = f"{deadline.enforce_at:{TIMESTAMP}}"
        left_text = _span(left) if left.total_seconds() > 0 else f"{_span(-left)} over"
    row = [
        facts.instance_id,
        *([host.account or "-"] if accounts else []),
        host.state,
        left_text,
        facts.tenant or "untagged",
        deadline_text,
        f"{facts.tags.get(tags.STACK, '-')}/{facts.pool or '-'}",
        _money(host.usd_per_hour),
        facts.instance_type,
        str(host.accelerators or "?"),
        _span(host.age),
        _money(host.cost_so_far),
    ]
    return [*row, facts.region] if several_regions else row


def _print_stopped(console: Console, report: FleetStatus) -> bool:
    """Managed GPU hosts stopped past the retention: their volumes still bill every month."""
    if not report.stopped:
        return False
    several_regions = len(report.regions) > 1
    columns = [
        Column("instance", 0),
        *([Column("account", 0)] if report.accounts is not None else []),
        Column("stopped", 0, justify="right"),
        Column("$/month", 0, justify="right"),
        Column("tenant", 1),
        Column("GB", 3, justify="right"),
        Column("stack/pool", 4),
        Column("owner", 5),
        *([Column("region", 2)] if several_regions else []),
    ]
    rows = []
    for stopped in report.stopped:
        host, storage = stopped.host, stopped.storage
        row = [
            host.instance_id,
            *([stopped.account or "-"] if report.accounts is not None else []),
            _span(stopped.stopped_for),
            _money(storage.monthly_usd) + ("+?" if storage.unpriced else ""),
            host.tenant or "untagged",
            f"{storage.size_gb:,}",
            f"{host.tags.get(tags.STACK, '-')}/{host.pool or '-'}",
            owner_of(host.tags) or "-",
        ]
        rows.append([*row, host.region] if several_regions else row)
    total = sum(stopped.storage.monthly_usd for stopped in report.stopped)
    title = f"Stopped past the retention ({len(rows):,}): their volumes cost ${_money(total)} a month"
    _print(console, title, columns, rows)
    return True


def _print_groups(console: Console, report: FleetStatus) -> bool:
    if not report.groups:
        return False
    columns = [
        Column("Auto Scaling group", 0),
        Column("min/desired/max", 0),
        Column("in service", 1, justify="right"),
        Column("park record", 2, detail=True),
        Column("deploy", 3, detail=True),
    ]
    rows = [
        [
            group.name,
            f"{group.minimum}/{group.desired}/{group.maximum}",
            str(group.in_service),
            group.park_record.summary() if group.park_record else "-",
            f"extra host (surge to {group.surge})" if group.surge else "-",
        ]
        for group in report.groups
    ]
    _print(console, "GPU pools", columns, rows)
    return True


def _print_services(console: Console, report: FleetStatus) -> bool:
    if not report.services:
        return False
    columns = [
        Column("service", 0),
        Column("PRIMARY runs", 1),
        Column("revision", 2),
        Column("traffic", 3),
        Column("desired/running", 0),
        Column("rollout", 4),
        Column("park record", 2, detail=True),
        Column("stack", 5),
    ]
    rows = [
        [
            service.name,
            service.task_definition or "-",
            service.revision or "-",
            service.traffic or "no load balancer",
            f"{service.desired}/{service.running}"
            + (f" (+{service.pending} pending)" if service.pending else ""),
            service.rollout or "-",
            service.park_record.summary() if service.park_record else "-",
            service.stack,
        ]
        for service in report.services
    ]
    _print(console, "Services", columns, rows)
    return True


def _print_stacks(console: Console, report: FleetStatus) -> bool:
    if not report.stacks:  # a filter left none: no empty table
        return False
    accounts = report.accounts is not None
    columns = [
        Column("stack", 0),
        *([Column("account", 0)] if accounts else []),
        Column("parked", 0),
        Column("next nightly start UTC", 1, detail=True),
        Column("region", 2),
    ]
    rows = []
    for stack in report.stacks:
        start = stack.next_start(report.now)
        parked = {True: "yes", False: "no", None: f"unknown ({stack.park_value})"}[stack.parked]
        if stack.organisation and stack.parked is False:
            parked = "organisation"  # its launcher refuses every start (the summary names the hub)
        when = (
            f"{start[0].pool} at {start[1]:{TIMESTAMP}} (in {_span(start[1] - report.now)})"
            if start
            else "none"
        )
        rows.append([stack.stack, *([stack.account or "-"] if accounts else []), parked, when, stack.region])
    _print(console, "Stacks", columns, rows)
    return True


def _print_tenants(console: Console, report: FleetStatus) -> bool:
    tenant_rows = report.tenant_rows()
    if not tenant_rows:  # no host and no ledger row (a filter left none): no empty table
        return False
    ledger = report.ledger is not None
    columns = [
        Column("tenant", 0),
        Column("hosts", 1, justify="right"),
        Column("GPUs", 3, justify="right"),
        Column("$/h", 1, justify="right"),
        Column("so far $", 2, justify="right"),
        *(
            [
                Column("spent $", 2, justify="right"),
                Column("remaining $", 2, justify="right"),
                Column("runway", 1),
            ]
            if ledger
            else []
        ),
    ]
    rows = []
    for row in tenant_rows:
        cells = [row["tenant"], str(row["hosts"]), str(row["accelerators"]), _money(row["usd_per_hour"]),
                 _money(row["cost_so_far_usd"])]  # fmt: skip
        rows.append(cells + (_ledger_cells(row["ledger"]) if ledger else []))
    _print(console, "By tenant", columns, rows)
    if not ledger:
        console.print("[dim]ledger not configured (PARKBRAKE_DATABASE_URL): no spend or runway per tenant[/]")
    return True


def _ledger_cells(ledger: dict[str, Any] | None) -> list[str]:
    """Spent, remaining and runway from the ledger's row for a tenant (``TenantRunway.as_dict``)."""
    if ledger is None:
        return ["-", "-", "-"]
    remaining, runway = ledger["remaining_usd"], ledger["runway_seconds"]
    return [
        _money(ledger["spent_usd"]),
        "no budget" if remaining is None else _money(remaining),
        "unbounded" if runway is None else _span(timedelta(seconds=runway)),
    ]
