"""The guardrail Lambdas, one ``Function`` each (``lambdas.<guardrail>.handler``), and what each one's
code does with AWS: the roles (components/iam_policies.py), the environment and the triggers
(components/guardrail_functions.py) are derived from these flags.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Function:
    """One guardrail Lambda, ``lambdas.<guardrail>.handler``, and what its code does with AWS."""

    guardrail: str
    timeout_s: int
    stops_hosts: bool = False  # through lambdas.aws.stop_path (the sweep, a deadline already due, budgets)
    arms_deadlines: bool = False  # creates, moves and deletes per-host deadline schedules
    starts_pool: bool = False  # sets the nightly pool's desired capacity
    uses_database: bool = False  # the ledger: runs in the VPC with the database secret
    # Its clock skips the database while no accelerator host runs, so a parked database can pause.
    database_while_hosts_run: bool = False


# Lambda's maximum: 1.9 times the sweep over 10,000 due hosts in groups measured against moto (465 s:
# listing 371 s, removals 94 s; docs/guardrails.md, "Removing 10,000 hosts from their groups").
REAPER = Function("reaper", timeout_s=900, stops_hosts=True, arms_deadlines=True)
DEADLINE = Function("deadline", timeout_s=60, stops_hosts=True, arms_deadlines=True)
LAUNCHER = Function("launcher", timeout_s=60, starts_pool=True, uses_database=True)
METER = Function("meter", timeout_s=60, stops_hosts=True, uses_database=True)
BUDGET = Function(
    "budget", timeout_s=120, stops_hosts=True, uses_database=True, database_while_hosts_run=True
)
RECONCILER = Function("reconciler", timeout_s=300, uses_database=True)
FUNCTIONS = (REAPER, DEADLINE, LAUNCHER, METER, BUDGET, RECONCILER)
# A hub's guardrails that act in the member accounts whatever the sweep (lambdas/aws/spoke_list.py).
LEARN_MEMBER_ACCOUNTS = (METER, BUDGET, RECONCILER)
