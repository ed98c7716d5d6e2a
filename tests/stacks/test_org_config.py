"""The organisation's section of a hub stack: the example parses, its accounts come from a c7n-org list,
and every bad value is named by its path, the account list's own problems included."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from stacks.config import load_stack_config, parse_stack_config
from stacks.validation import ConfigError
from tests.conftest import REPO_ROOT

ORG = "parkbrake:organisation"


def org_example() -> dict[str, Any]:
    document = YAML(typ="safe").load((REPO_ROOT / "Pulumi.org.yaml").read_text())
    return copy.deepcopy(document["config"])


def problems_of(config: dict[str, Any], project_dir: Path = REPO_ROOT) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        parse_stack_config("org", config, "Pulumi.org.yaml", project_dir=project_dir)
    return {problem.path: problem.message for problem in raised.value.problems}


def test_the_example_hub_declares_a_spoke_per_account_and_region_swept_centrally_by_default() -> None:
    config = load_stack_config("org", REPO_ROOT)
    organisation = config.organisation
    assert organisation is not None
    assert (organisation.hub_account, organisation.org_id, organisation.spokes) == (
        "111111111111",
        "o-a1b2c3d4e5",
        "stacks",
    )
    # An account naming no regions gets the organisation's; the others keep their own (c7n-org's regions).
    assert [(p.account_name, p.region) for p in organisation.placements()] == [
        ("hub", "us-east-1"),
        ("ml-research", "us-east-1"),
        ("ml-research", "us-west-2"),
        ("ml-prod", "us-west-2"),
    ]
    chained = organisation.placements()[-1]
    assert chained.role_chain[-1] == "arn:aws:iam::333333333333:role/parkbrake-deployer"
    assert chained.external_id == "parkbrake-org"
    without_sweep = org_example()
    del without_sweep[ORG]["sweep"]
    parsed = parse_stack_config("org", without_sweep, "Pulumi.org.yaml", project_dir=REPO_ROOT)
    assert parsed.organisation is not None
    assert parsed.organisation.sweep == "central"


def test_every_bad_value_is_named_by_its_path_at_once() -> None:
    config = org_example()
    config[ORG].update(
        hub_account=111111111111,
        org_id="org-1",
        regions=["us-east-1", "moon"],
        sweep="everywhere",
        spokes="stackset",
        organizational_units=["ou-nope"],
        colour="blue",
    )
    problems = problems_of(config)
    assert problems["organisation.hub_account"] == "111111111111 is not a quoted 12-digit account id"
    assert problems["organisation.org_id"] == '"org-1" is not an organisation id such as o-a1b2c3d4e5'
    assert problems["organisation.regions[1]"] == '"moon" is not an AWS region such as us-east-1'
    assert problems["organisation.sweep"] == '"everywhere" is not allowed; use central or spoke'
    assert problems["organisation.organizational_units[0]"].startswith('"ou-nope" is not an OU id')
    assert problems["organisation.colour"].startswith(
        "unknown key; allowed here: accounts, code_bucket_prefix"
    )


def test_each_form_requires_what_it_deploys_to() -> None:
    stackset = org_example()
    stackset[ORG].update(spokes="stackset")
    del stackset[ORG]["organizational_units"], stackset[ORG]["accounts"]
    assert problems_of(stackset) == {
        "organisation.organizational_units": "is required with spokes: stackset "
        "(the OUs the StackSet deploys to automatically)"
    }
    stacks = org_example()
    del stacks[ORG]["accounts"]
    assert problems_of(stacks) == {
        "organisation.accounts": "is required with spokes: stacks (a c7n-org account list file)"
    }


def test_the_account_lists_own_problems_are_reported_under_the_key_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "accounts.yml").write_text(
        "accounts:\n- account_id: '12345'\n  name: a\n  role: r\n- account_id: '222222222222'\n  name: a\n"
    )
    config = org_example()
    config[ORG]["accounts"] = "accounts.yml"
    problems = problems_of(config, tmp_path)
    assert problems["organisation.accounts (accounts.yml) accounts[0].account_id"].startswith(
        "'12345' is not a 12-digit AWS account id"
    )
    assert problems["organisation.accounts (accounts.yml) accounts[1].role"].startswith("is required unless")
    config[ORG]["accounts"] = "missing.yml"
    assert problems_of(config, tmp_path) == {
        "organisation.accounts": "cannot read missing.yml (No such file or directory); give the account list's path"
    }


def test_a_stack_name_too_long_for_a_spokes_names_is_reported_before_any_deploy() -> None:
    """A spoke's rule is ``parkbrake-<stack>-spoke-<region>-deadline-tags``: EventBridge takes 64
    characters (botocore events/2015-10-07 RuleName), so the longest region decides."""
    config = org_example()
    config[ORG]["regions"] = ["us-east-1", "ap-southeast-2"]
    fits = "s" * 19  # 10 + 19 + 7 + 14 + 14 = 64
    parsed = parse_stack_config(fits, config, f"Pulumi.{fits}.yaml", project_dir=REPO_ROOT)
    assert parsed.organisation is not None
    too_long = "s" * 20
    with pytest.raises(ConfigError) as raised:
        parse_stack_config(too_long, config, f"Pulumi.{too_long}.yaml", project_dir=REPO_ROOT)
    (problem,) = raised.value.problems
    assert problem.path == "organisation"
    # forward-state and deadline-tags are both 14 characters: either may be named
    assert problem.message.startswith(f"the spoke's name parkbrake-{too_long}-spoke-ap-southeast-2-")
    assert problem.message.endswith(
        "(ap-southeast-2) is 65 characters, over AWS's 64; use a stack name of at most 19 characters"
    )


def test_a_hub_without_pools_needs_no_host_tools_but_a_stack_with_pools_still_does() -> None:
    assert "hosts" not in org_example()
    config = org_example()
    config["parkbrake:pools"] = {
        "training": {
            "role": "training",
            "instance_type": "g5.xlarge",
            "tenant": "research",
            "max": 1,
            "max_runtime": "1h",
        }
    }
    assert problems_of(config)["hosts"].startswith("is required")
