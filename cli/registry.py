"""Every ``parkbrake`` command, by name, as ``module:attribute``.

Registration is this explicit table, never an import side effect; commands are imported only when
they run (or when ``--help`` lists them), so ``parkbrake --help`` stays instant.
"""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "plan": "cli.plan:plan",
    "reap": "cli.reap:reap",
    "pricing": "cli.pricing:pricing",
    "run": "cli.run:run",
    "agent": "cli.agent:agent",
    "ledger": "cli.ledger:ledger",
    "exporter": "cli.exporter:exporter",
    "park": "cli.park:park",
    "unpark": "cli.park:unpark",
    "status": "cli.status:status",
    "schedule": "cli.schedule:schedule",
    "deploy": "cli.deploy:deploy",
    "verify": "cli.verify:verify",
}
