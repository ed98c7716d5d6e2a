"""The organisation's park switches in one account and region: each hub whose spoke is deployed here
wrote ``/parkbrake/<hub stack>/spoke-<region>/parked`` (components/org_spoke_parts.py). A member
account's own stacks are not told which organisation deploys to them (a StackSet deploys when the
account joins the OU), so the switches are found, not configured: one ``GetParametersByPath`` on
``/parkbrake``, recursive, paginated (botocore's ``ssm/2014-11-06/service-2.json``: ``Recursive``
returns every level below the path). The launcher refuses a start while one is on
(lambdas/engines/launching.py); ``parkbrake status`` shows it beside the stacks it stops."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from guardrails.errors import ParkbrakeError
from lambdas.aws.errors import AWS_ERRORS, describe_error

# Every organisation's park switch as its spoke names it (guardrails.names.spoke_park_parameter).
SPOKE_PARK_SWITCH = re.compile(r"/parkbrake/(?P<stack>[^/]+)/spoke-(?P<region>[^/]+)/parked")


@dataclass(frozen=True)
class OrganisationSwitch:
    """One hub's park switch that is on: the SSM parameter and the hub stack that wrote it."""

    parameter: str
    hub: str


def organisation_switches_on(ssm: Any, region: str) -> list[OrganisationSwitch]:
    """The organisation park switches of ``region`` that are on, by parameter name. None found is "no
    organisation"; a switch that is neither true nor false, or a read that fails (AccessDenied,
    throttling), raises ParkbrakeError: never "unparked", as for a stack's own switch."""
    switches: dict[str, tuple[str, str]] = {}  # parameter -> (its hub stack, its value)
    try:
        for page in ssm.get_paginator("get_parameters_by_path").paginate(Path="/parkbrake", Recursive=True):
            for parameter in page["Parameters"]:
                found = SPOKE_PARK_SWITCH.fullmatch(parameter["Name"])
                if found is not None and found["region"] == region:
                    switches[parameter["Name"]] = (found["stack"], parameter["Value"])
    except AWS_ERRORS as error:
        raise ParkbrakeError(
            f"cannot read the organisation's park switches under /parkbrake: {describe_error(error)}"
        ) from None
    on = []
    for name, (hub, value) in sorted(switches.items()):
        if value.strip().lower() not in ("true", "false"):
            raise ParkbrakeError(f"SSM parameter {name} is {value!r}, neither 'true' nor 'false'")
        if value.strip().lower() == "true":
            on.append(OrganisationSwitch(name, hub))
    return on


def organisation_parked(ssm: Any, region: str) -> str | None:
    """Why an organisation's park switch in this account and region refuses a start, or None."""
    on = organisation_switches_on(ssm, region)
    if not on:
        return None
    return (
        f"the organisation parked this account: {', '.join(switch.parameter for switch in on)} is true; "
        f"unpark the organisation's hub stack ({', '.join(switch.hub for switch in on)}) to run the nightly pools"
    )
