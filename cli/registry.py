"""Every ``parkbrake`` command, by name, as ``module:attribute``.

Registration is this explicit table, never an import side effect; commands are imported only when
they run (or when ``--help`` lists them), so ``parkbrake --help`` stays instant.
"""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "plan": "cli.plan:plan",
    "run": "cli.run:run",
    "agent": "cli.agent:agent",
}
