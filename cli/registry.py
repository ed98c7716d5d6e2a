"""Every ``parkbrake`` command, by name: where it lives (``module:attribute``) and its one-line help.

Registration is this explicit table, never an import side effect. A command's module is imported only
when the command runs (or its own ``--help`` is asked for): ``parkbrake --help`` lists the commands
with the help written here, so it imports none of them. A convention test checks that each line
equals the command's own short help.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LazyCommand:
    target: str  # "module:attribute" of the click command
    short_help: str  # the first sentence of the command's docstring, as click would show it


COMMANDS: dict[str, LazyCommand] = {
    "plan": LazyCommand(
        "cli.plan:plan",
        "Preview a stack offline: resources, monthly cost parked and unparked, policy verdicts.",
    ),
    "package": LazyCommand(
        "cli.package:package",
        "Write the Lambda archives and layers `pulumi up` uploads, and DIR/manifest.json.",
    ),
    "reap": LazyCommand(
        "cli.reap:reap", "Run the sweep now: stop every running managed GPU host past its deadline."
    ),
    "pricing": LazyCommand(
        "cli.pricing:pricing", "On-demand and spot prices used by plan, status and the ledger."
    ),
    "run": LazyCommand(
        "cli.run:run", "Run COMMAND, stop it at its cap, exit with its status, then shut the host down."
    ),
    "agent": LazyCommand(
        "cli.agent:agent", "Export GPU metrics on /metrics and shut the host down when every GPU is idle."
    ),
    "ledger": LazyCommand(
        "cli.ledger:ledger",
        "The usage ledger: exact accelerator-seconds and cost per tenant, budgets and runway.",
    ),
    "exporter": LazyCommand(
        "cli.exporter:exporter",
        "Serve the ledger's metrics for Prometheus: GPU-seconds, cost, running GPUs, budget remaining, runway.",
    ),
    "park": LazyCommand(
        "cli.park:park",
        "Park a stack: GPU pools and services to zero, nightly starts off, guardrails left running.",
    ),
    "unpark": LazyCommand(
        "cli.park:unpark", "Unpark a stack: the reverse of `parkbrake park`, with the same options."
    ),
    "status": LazyCommand(
        "cli.status:status",
        "Every running GPU host and what it costs; services, park state, next nightly start.",
    ),
    "schedule": LazyCommand(
        "cli.schedule:schedule",
        "The stack's nightly schedules (EventBridge Scheduler group parkbrake-<stack>).",
    ),
    "deploy": LazyCommand(
        "cli.deploy:deploy",
        "Deploy IMAGE as REVISION to SERVICE (e.g. inference), blue-green; or --abort one.",
    ),
    "verify": LazyCommand("cli.verify:verify", "Prove that SERVICE (e.g. inference) runs REVISION."),
    "keys": LazyCommand(
        "cli.keys:keys",
        "API keys of the inference service: one tenant per key, stored hashed (PARKBRAKE_DATABASE_URL).",
    ),
    "rollback": LazyCommand(
        "cli.deploy:rollback",
        "Deploy SERVICE's previous verified revision again, blue-green, as `deploy` would.",
    ),
    "extend": LazyCommand(
        "cli.extend:extend",
        "Move one GPU host's deadline later, within the stack's exemption limit and runtime ceiling.",
    ),
    "log": LazyCommand(
        "cli.log:log", "The guardrails' decision log: who decided what about a host, and why."
    ),
    "guard-policy": LazyCommand(
        "cli.guard_policy:guard_policy",
        "Print the preventive policy that keeps accelerator hosts inside the guardrails.",
    ),
    "k8s": LazyCommand(
        "cli.k8s:k8s", "The Kubernetes stack: render its objects, decide and run the budget admission check."
    ),
    "dev": LazyCommand(
        "cli.dev:dev",
        "Local development: a throwaway PostgreSQL with the ledger's tables, for the ledger and inference.",
    ),
}
