"""The reconciler's Lambda entry point: every 15 minutes, make the ledger agree with what EC2 says of its
accelerator hosts, prune the decision log and record spot prices (:mod:`lambdas.engines.reconciling`).

Any event will do (the schedule's). The result is ``{"hosts", "repairs", "pruned_decisions",
"spot_prices"}`` with the meter's counts of the repairs (``"inserted"``, ``"duplicates"``, ...).
"""

from __future__ import annotations

from typing import Any

from lambdas.aws.environment import container_settings, default_clients, utc_now
from lambdas.aws.spoke_list import SpokeList
from lambdas.engines.reconciling import reconcile_ledger
from lambdas.ledger.store import container_store

# A hub's spokes (the member accounts whose hosts it lists), kept by the container as the meter's are.
CONTAINER_SPOKES = SpokeList()


def handler(event: dict[str, Any], context: object) -> dict[str, Any]:
    now = utc_now()
    settings = container_settings()
    return reconcile_ledger(
        store=container_store(),
        clients=default_clients,
        settings=settings,
        now=now,
        invoked_function_arn=getattr(context, "invoked_function_arn", None),
        spokes=CONTAINER_SPOKES,
    )
