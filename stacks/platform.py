"""The program a stack runs: the AWS platform (:mod:`stacks.program`) or, for a stack with a
``parkbrake:kubernetes`` section, the Kubernetes one (:mod:`stacks.kubernetes_program`), which
reuses the AWS program's network, data stores and guardrails. A stack with a
``parkbrake:organisation`` section is an organisation's hub: the AWS program, then the hub's bus and
the spokes (:mod:`stacks.org_program`). The choice lives here, above both,
so neither program imports the other back.
"""

from __future__ import annotations

from stacks.config import StackConfig
from stacks.kubernetes_program import build_kubernetes_platform
from stacks.org_program import build_organisation
from stacks.program import build_aws_platform


def build_platform(config: StackConfig) -> None:
    """Declare every resource of the stack ``config`` describes."""
    if config.kubernetes is not None:
        build_kubernetes_platform(config)
        return
    guardrails = build_aws_platform(config)
    if config.organisation is not None:
        build_organisation(config, guardrails)
