"""A test organisation in moto: member accounts reached by assuming a role in each (moto's
``sts:AssumeRole`` into another account id acts in that account, moto/sts/models.py), a few GPU hosts
in each, and the c7n-org account list that names them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrails import tags
from lambdas.aws.assumed import AccountAccess, AccountSessions
from tests.moto_iam_auth import role_arn

REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
IMAGE = "ami-12c6146b"  # one of moto's built-in images


@dataclass(frozen=True)
class Member:
    account_id: str
    name: str
    role: str = "reader"
    regions: tuple[str, ...] = REGIONS


def members(count: int, *, first: int = 100000000001) -> list[Member]:
    return [Member(f"{first + number:012d}", f"team-{number + 1:02d}") for number in range(count)]


def seed_hosts(
    organisation: Sequence[Member], *, hosts: int = 1, instance_type: str = "g5.xlarge"
) -> dict[str, list[str]]:
    """``hosts`` GPU hosts in each member (in one of its regions, in turn), tenant-tagged by the
    account's name; the instance ids by account id."""
    sessions = AccountSessions()
    made: dict[str, list[str]] = {}
    for index, member in enumerate(organisation):
        access = AccountAccess(member.account_id, (role_arn(member.account_id, member.role),))
        region = member.regions[index % len(member.regions)]
        ec2 = sessions.clients(access)("ec2", region)
        tagging = [
            {
                "ResourceType": "instance",
                "Tags": [{"Key": tags.TENANT, "Value": ("vision", "speech")[index % 2]}],
            }
        ]
        answer = ec2.run_instances(
            ImageId=IMAGE,
            MinCount=hosts,
            MaxCount=hosts,
            InstanceType=instance_type,
            TagSpecifications=tagging,
        )
        made[member.account_id] = sorted(instance["InstanceId"] for instance in answer["Instances"])
    return made


def accounts_file(
    folder: Path, organisation: Sequence[Member], *, chains: dict[str, list[str]] | None = None
) -> Path:
    """The c7n-org account list of ``organisation`` (a member's role a chain where ``chains`` says)."""
    lines = ["accounts:"]
    for member in organisation:
        chain = (chains or {}).get(member.account_id)
        role = "[" + ", ".join(chain) + "]" if chain else role_arn(member.account_id, member.role)
        lines += [
            f"- account_id: '{member.account_id}'",
            f"  name: {member.name}",
            f"  role: {role}",
            f"  regions: [{', '.join(member.regions)}]",
        ]
    path = folder / "accounts.yml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
