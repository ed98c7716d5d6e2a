"""The organisation's pieces under the mock engine, for the component, stack, policy and plan tests."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pulumi
from ruamel.yaml import YAML

from components.org_spoke import OrgSpoke, OrgSpokeArgs
from components.org_spoke_parts import SpokeArgs, SweepMode
from stacks.config import StackConfig, parse_stack_config
from stacks.offline import OfflineRun, run_offline
from stacks.platform import build_platform
from tests.conftest import REPO_ROOT

HUB_ACCOUNT = "111111111111"
MEMBER = "222222222222"
HUB_REGION = "us-east-1"
HUB_BUS_ARN = f"arn:aws:events:{HUB_REGION}:{HUB_ACCOUNT}:event-bus/parkbrake-org-hub"
TAGS = {"parkbrake:managed": "true", "parkbrake:stack": "org"}
RULE = "aws:cloudwatch/eventRule:EventRule"
TARGET = "aws:cloudwatch/eventTarget:EventTarget"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
FUNCTION = "aws:lambda/function:Function"


def member_spoke(sweep: SweepMode = "central", account: str = MEMBER, region: str = "us-west-2") -> SpokeArgs:
    return SpokeArgs("org", HUB_ACCOUNT, HUB_REGION, account=account, region=region, sweep=sweep)


@functools.cache
def spoke_run(sweep: SweepMode = "central") -> OfflineRun:
    spoke = member_spoke(sweep)

    def program() -> None:
        OrgSpoke(
            f"spoke-{spoke.account}-{spoke.region}",
            OrgSpokeArgs(spoke, "ml-research", pulumi.FileArchive("code"), pulumi.FileArchive("layer"), TAGS),
        )

    return run_offline(program, stack="org", region=spoke.region)


def org_config(**organisation: Any) -> StackConfig:
    """Pulumi.org.yaml with some keys of its organisation section changed."""
    document = YAML(typ="safe").load((REPO_ROOT / "Pulumi.org.yaml").read_text())
    config = copy.deepcopy(document["config"])
    config["parkbrake:organisation"].update(organisation)
    return parse_stack_config("org", config, "Pulumi.org.yaml", project_dir=REPO_ROOT)


def org_run(config: StackConfig) -> OfflineRun:
    return run_offline(lambda: build_platform(config), stack=config.stack, region=config.region)


@functools.cache
def org_run_of(spokes: str = "stacks", sweep: str = "central") -> OfflineRun:
    return org_run(org_config(spokes=spokes, sweep=sweep))
