"""Clients in other accounts through assumed roles (lambdas/aws/assumed.py), on moto's server.

moto's ``sts:AssumeRole`` into a role ARN of another account id returns credentials that act in that
account (moto/sts/models.py, ``STSBackend.assume_role``: "The ARN can point to another account"), so
hosts made through one account's session are invisible to another's. A denied role needs IAM's
authorisation, which moto applies once its server is told to (``POST /moto-api/reset-auth``,
moto/moto_api/_internal/responses.py): the caller is then an IAM user whose policy allows assuming
some roles and not others, and moto evaluates it (moto/core/authorization.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lambdas.aws.assumed import (
    AccountAccess,
    AccountSessions,
    ClientFactory,
    Place,
    SharedRateLimit,
    across_places,
    failures_of,
)
from tests import moto_iam_auth
from tests.moto_iam_auth import role_arn

SPOKES = ("111111111111", "222222222222", "333333333333")
IMAGE = "ami-12c6146b"  # one of moto's built-in images


def place(account: str, chain: tuple[str, ...], region: str = "us-east-1") -> Place:
    return Place(account, f"acct-{account[:3]}", region, AccountAccess(account, chain))


def instance_ids(place: Place, clients: ClientFactory) -> list[str]:
    ec2 = clients("ec2", place.region)
    return sorted(i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"])


def launch(sessions: AccountSessions, access: AccountAccess, region: str, count: int) -> list[str]:
    ec2 = sessions.clients(access)("ec2", region)
    made = ec2.run_instances(ImageId=IMAGE, MinCount=count, MaxCount=count, InstanceType="g5.xlarge")
    return sorted(i["InstanceId"] for i in made["Instances"])


def test_each_account_sees_its_own_hosts_through_its_role(aws: str) -> None:
    sessions = AccountSessions()
    made = {
        account: launch(sessions, AccountAccess(account, (role_arn(account),)), "us-east-1", index + 1)
        for index, account in enumerate(SPOKES)
    }
    places = [place(account, (role_arn(account),)) for account in SPOKES]
    outcomes = across_places(places, instance_ids, sessions=sessions, concurrency=2)
    assert [outcome.value for outcome in outcomes] == [made[account] for account in SPOKES]
    assert failures_of(outcomes) == []
    own = boto3.client("ec2").describe_instances()["Reservations"]
    assert own == []  # the hub's account has none of them


def test_a_chain_acts_in_its_last_account(aws: str) -> None:
    sessions = AccountSessions()
    chain = (role_arn(SPOKES[0], "hub"), role_arn(SPOKES[1], "deployer"))
    made = launch(sessions, AccountAccess(SPOKES[1], chain), "us-west-2", 2)
    identity = sessions.clients(AccountAccess(SPOKES[1], chain))("sts", "us-west-2").get_caller_identity()
    assert identity["Account"] == SPOKES[1]
    seen = across_places(
        [place(SPOKES[1], (role_arn(SPOKES[1]),), "us-west-2")], instance_ids, sessions=sessions
    )
    assert seen[0].value == made


def test_regions_of_one_account_share_one_assumption(aws: str) -> None:
    sessions = AccountSessions()
    access = AccountAccess(SPOKES[0], (role_arn(SPOKES[0]),))
    regions = ("us-east-1", "us-west-2", "eu-west-1", "ap-south-1")
    places = [Place(SPOKES[0], "one", region, access) for region in regions]
    across_places(places, instance_ids, sessions=sessions, concurrency=4)
    assumed = {id(sessions._session(access))}
    assert len(assumed) == 1
    identity = sessions.clients(access)("sts", None).get_caller_identity()
    assert identity["Arn"].startswith(f"arn:aws:sts::{SPOKES[0]}:assumed-role/reader/")


def test_an_error_in_one_place_is_its_line_and_the_others_are_answered(aws: str) -> None:
    def work(place: Place, clients: ClientFactory) -> list[str]:
        if place.account_id == SPOKES[1]:
            clients("ec2", place.region).describe_instances(InstanceIds=["i-0000000000000dead"])
        return instance_ids(place, clients)

    places = [place(account, (role_arn(account),)) for account in SPOKES]
    outcomes = across_places(places, work, sessions=AccountSessions())
    assert [outcome.value for outcome in outcomes] == [[], None, []]
    (line,) = failures_of(outcomes)
    assert line.startswith(f"acct-222 ({SPOKES[1]}) us-east-1: InvalidInstanceID.NotFound:")
    assert "\n" not in line


def test_a_bug_in_the_work_is_raised_not_reported(aws: str) -> None:
    def work(place: Place, clients: ClientFactory) -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        across_places([place(SPOKES[0], (role_arn(SPOKES[0]),))], work, sessions=AccountSessions())


def test_every_client_sends_through_one_limiter(aws: str) -> None:
    limit = SharedRateLimit()
    seen: list[str] = []
    lock = threading.Lock()
    original = limit.limiter.on_sending_request

    def counting(request: Any, **kwargs: Any) -> None:
        with lock:
            seen.append(request.url)
        return original(request, **kwargs)

    limit.limiter.on_sending_request = counting  # type: ignore[method-assign]
    sessions = AccountSessions(rate_limit=limit)
    places = [
        place(account, (role_arn(account),), region)
        for account in SPOKES
        for region in ("us-east-1", "eu-west-1")
    ]
    across_places(places, instance_ids, sessions=sessions)
    # three AssumeRole calls (one per account) and six DescribeInstances (one per place)
    assert len(seen) == 9


@pytest.fixture
def enforced_iam(aws: str) -> Iterator[dict[str, str]]:
    """The hub's caller as an IAM user allowed to assume the spokes' reader roles but the third's."""
    with moto_iam_auth.enforced_iam(aws, SPOKES, SPOKES[:2]) as credentials:
        yield credentials


def test_a_denied_role_is_a_line_and_the_other_accounts_are_answered(
    enforced_iam: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable, value in enforced_iam.items():
        monkeypatch.setenv(variable, value)
    places = [place(account, (role_arn(account),)) for account in SPOKES]
    outcomes = across_places(places, instance_ids, sessions=AccountSessions())
    assert [outcome.value for outcome in outcomes] == [[], [], None]
    (line,) = failures_of(outcomes)
    assert line.startswith(
        f"acct-333 ({SPOKES[2]}) us-east-1: cannot assume {role_arn(SPOKES[2])}: AccessDenied"
    )


def test_places_are_each_account_in_each_of_its_regions() -> None:
    from guardrails.accounts import load_accounts
    from lambdas.aws.assumed import places_of

    listed = load_accounts(
        f"accounts:\n- account_id: '{SPOKES[0]}'\n  name: ml\n  role: reader\n  regions: [eu-west-1, us-east-1]\n"
        f"- account_id: '{SPOKES[1]}'\n  profile: ml-local\n"
    )
    places = places_of(listed, ["us-west-2"])
    assert [(p.label, p.access.role_chain, p.access.profile) for p in places] == [
        (f"ml ({SPOKES[0]}) eu-west-1", (role_arn(SPOKES[0]),), None),
        (f"ml ({SPOKES[0]}) us-east-1", (role_arn(SPOKES[0]),), None),
        (f"{SPOKES[1]} us-west-2", (), "ml-local"),
    ]
    everywhere = load_accounts(f"accounts:\n- account_id: '{SPOKES[2]}'\n  role: reader\n  regions: [all]\n")
    with pytest.raises(ValueError, match=r"regions \[all\] must be expanded"):
        places_of(everywhere, ["us-west-2"])
