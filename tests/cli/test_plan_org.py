"""`parkbrake plan --stack org`: the hub and its spokes previewed offline in either form, each account's
monthly cost parked and unparked and the organisation's total, at 80 columns with the answer last; and
a spoke that lacks its forwarding fails the plan with the policy's message."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from ruamel.yaml import YAML

import components.org_spoke
from cli.main import parkbrake
from components.org_spoke_parts import Part, SpokeArgs, spoke_parts
from tests.conftest import REPO_ROOT

ORG = REPO_ROOT / "Pulumi.org.yaml"


def plan(*arguments: str) -> Result:
    return CliRunner().invoke(
        parkbrake, ["plan", "--stack", "org", "--project-dir", str(REPO_ROOT), *arguments]
    )


def org_file(folder: Path, **organisation: Any) -> Path:
    document = YAML(typ="safe").load(ORG.read_text())
    document["config"]["parkbrake:organisation"].update(organisation)
    path = folder / "Pulumi.org.yaml"
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    with path.open("w") as stream:
        yaml.dump(document, stream)
    return path


def test_text_prices_every_account_and_ends_with_the_organisations_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = plan()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line for line in lines if len(line) > 80] == []
    start = lines.index("Organisation: spokes as a Pulumi spoke per account and region; sweep: central")
    table = lines[start + 1 : start + 7]
    assert table[1].split()[:5] == ["111111111111", "hub", "hub", "and", "1"]
    assert table[2].split()[:4] == ["222222222222", "ml-research", "2", "spokes"]
    assert table[3].split() == ["333333333333", "ml-prod", "1", "spoke", "$0.00", "$0.00"]
    assert table[4].split()[0] == "total"
    closing = lines[-4:]
    assert closing[0].startswith("Stack org, unparked, ")
    assert closing[2].startswith("Organisation, 3 account lines: unparked $")
    assert closing[3].startswith("Policies: all ")
    assert "spokes-forward-and-sweep" in result.output


def test_json_carries_each_accounts_figures_and_their_total() -> None:
    result = plan("--output", "json")
    assert result.exit_code == 0, result.output
    organisation = json.loads(result.output)["organisation"]
    assert (organisation["spokes"], organisation["sweep"]) == ("stacks", "central")
    lines = {line["account"]: line for line in organisation["accounts"]}
    hub = lines["111111111111"]["monthly_usd"]
    assert hub["unparked"] > hub["parked"] > 0  # the ledger's database pauses when parked
    assert lines["222222222222"]["monthly_usd"] == {"unparked": 0.0, "parked": 0.0}
    for state in ("unparked", "parked"):
        total = sum(Decimal(str(line["monthly_usd"][state])) for line in organisation["accounts"])
        assert Decimal(str(organisation["monthly_usd"][state])) == total
    cost = json.loads(result.output)["cost"]["monthly_usd"]
    assert organisation["monthly_usd"]["unparked"] == cost["unparked"]


def test_the_stack_set_form_previews_the_stack_set_and_prices_it_per_account(tmp_path: Path) -> None:
    path = org_file(tmp_path, spokes="stackset", sweep="spoke")
    result = plan("--config", str(path), "--output", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    types = {resource["type"] for resource in report["resources"]}
    assert "aws:cloudformation/stackSet:StackSet" in types
    assert "parkbrake:org:Spoke" not in types
    # the hub's code bucket of the one spoke region, and the two archives in it
    buckets = [resource for resource in report["resources"] if resource["type"] == "aws:s3/bucket:Bucket"]
    assert [bucket["name"] for bucket in buckets] == ["spoke-code-us-east-1"]
    objects = [r for r in report["resources"] if r["type"] == "aws:s3/bucketObjectv2:BucketObjectv2"]
    assert len(objects) == 2
    assert [line["account"] for line in report["organisation"]["accounts"]] == [
        "111111111111",
        "ou-ab12-cdef3456",
    ]
    assert all(verdict["passed"] for verdict in report["policies"])


def test_a_spoke_without_its_tag_forwarding_fails_the_plan_with_the_policys_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spoke component as a broken version would declare it: its parts less the tag-change rule."""

    def broken_parts(args: SpokeArgs) -> list[Part]:
        return [part for part in spoke_parts(args) if part.logical != "ForwardTagChanges"]

    monkeypatch.setattr(components.org_spoke, "spoke_parts", broken_parts)
    monkeypatch.setenv("COLUMNS", "200")
    result = plan()
    assert result.exit_code == 1, result.output
    for account, region in [("111111111111", "us-east-1"), ("222222222222", "us-west-2")]:
        assert (
            f"spoke {account}/{region}: no rule forwards 'Tag Change on Resource' events; the hub never hears of them"
            in result.output
        )
    assert result.output.splitlines()[-1] == "Mandatory policies failed: spokes-forward-and-sweep"
