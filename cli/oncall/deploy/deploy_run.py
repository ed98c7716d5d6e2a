"""What one deploy run carries from step to step: the request, the service, the result so far, and
the units every phase uses (the colours' health, the retreat). Each phase's step is a function of
its own module taking a :class:`DeployRun` (``start.py``, ``canary.py``, ``retire.py``,
``finish.py``, ``rollback.py``); ``blue_green.py`` observes, classifies and calls the phase's step."""

from __future__ import annotations

from dataclasses import dataclass

from cli.oncall.deploy.colour_health import ColourHealth
from cli.oncall.deploy.colour_retreat import Retreat
from cli.oncall.deploy.phases import DeployRequest, DeployResult
from cli.oncall.deploy.runtime import ServiceAt


@dataclass
class DeployRun:
    request: DeployRequest
    at: ServiceAt
    result: DeployResult
    health: ColourHealth
    retreat: Retreat
    # False once the old colour is scaled in: from there the old revision cannot take traffic back at once.
    may_roll_back: bool = True

    @property
    def revision(self) -> str:
        return self.request.revision
