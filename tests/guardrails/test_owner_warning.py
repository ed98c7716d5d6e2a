"""The owner's warning and the extension, pure: timing, content, limits; and docs/owners.md shows the
warning exactly as the code prints it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from guardrails import tags
from guardrails.deadlines import deadline_for
from guardrails.errors import InputError
from guardrails.extension import ExtensionRefused, extension_decision, plan_extension
from guardrails.hosts import Host
from guardrails.owners import owner_of, owner_problem
from guardrails.sweep_notice import running_cost
from guardrails.warning import OwnerWarning, warning_decision, warning_timing

DOCS = Path(__file__).resolve().parents[2] / "docs" / "owners.md"
STARTED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
OWNER = "ana@example.com"


def example_host(**extra: str) -> Host:
    """The host of docs/owners.md: a p4d training run of the research tenant, capped at 3h."""
    return Host(
        instance_id="i-0a1b2c3d4e5f67890",
        instance_type="p4d.24xlarge",
        state="running",
        launch_time=STARTED,
        tags={
            tags.MANAGED: "true",
            tags.STACK: "dev",
            tags.POOL: "training",
            tags.TENANT: "research",
            tags.MAX_RUNTIME: "3h",
            tags.REVISION: "4f2c9e1",
            tags.OWNER: OWNER,
            "Name": "llm-finetune-7b",
            **extra,
        },
        region="us-east-1",
    )


def deadline_of(host: Host, now: datetime, *, max_exemption: timedelta = timedelta(hours=24)):  # type: ignore[no-untyped-def]
    return deadline_for(
        host,
        pool_caps={},
        default_cap=timedelta(minutes=90),
        max_exemption=max_exemption,
        ceiling=timedelta(hours=24),
        now=now,
    )


def example_warning() -> OwnerWarning:
    host = example_host()
    now = STARTED + timedelta(hours=2, minutes=45)
    running, cost = running_cost(host, now)
    return OwnerWarning(host, deadline_of(host, now), now, running, cost, "dev", timedelta(hours=24))


def test_the_docs_show_the_warning_the_code_prints() -> None:
    warning = example_warning()
    shown = f"Subject: {warning.subject()}\n\n{warning.body()}"
    assert shown in DOCS.read_text(), f"docs/owners.md should show, verbatim:\n{shown}"


def test_the_warning_names_everything_the_owner_needs() -> None:
    warning = example_warning()
    body = warning.body()
    assert (
        warning.subject()
        == "parkbrake dev: i-0a1b2c3d4e5f67890 (llm-finetune-7b) stops at 2026-03-02T12:00:00Z unless extended"
    )
    assert "will be stopped in 15m, at 2026-03-02T12:00:00Z" in body
    assert "Name=llm-finetune-7b" in body
    assert "tenant    research" in body
    assert f"owner     {OWNER}" in body
    assert "running   2h45m since 2026-03-02T09:00:00Z" in body
    assert "cost      $" in body
    assert 'parkbrake extend i-0a1b2c3d4e5f67890 --stack dev --region us-east-1 --by 1h --reason "' in body


def test_the_warning_is_sent_only_near_the_deadline() -> None:
    host = example_host()
    warn_before = timedelta(minutes=15)
    at = STARTED + timedelta(hours=3)
    assert warning_timing(deadline_of(host, at - warn_before), at - warn_before, warn_before) == "warn"
    assert warning_timing(deadline_of(host, at), at, warn_before) == "due"
    extended = example_host(**{tags.EXEMPT_UNTIL: "2026-03-02T13:00:00Z"})
    now = at - warn_before
    assert warning_timing(deadline_of(extended, now), now, warn_before) == "moved"


@pytest.mark.parametrize("owner", ["ana@example.com", "ana.lima+gpu@ml.example.co.uk", "@ana", "@ml-oncall"])
def test_owners_are_addresses_or_handles(owner: str) -> None:
    assert owner_problem(owner) is None
    assert owner_of({tags.OWNER: owner}) == owner


@pytest.mark.parametrize(
    "owner", ["ana", "ana@", "ana@localhost", "a b@example.com", "@", "ana@@example.com", ""]
)
def test_a_malformed_owner_is_named_and_never_used(owner: str) -> None:
    problem = owner_problem(owner)
    assert problem is not None
    assert problem.startswith(f"{tags.OWNER}: {owner!r} is neither an e-mail address nor a chat handle")
    assert owner_of({tags.OWNER: owner}) is None


def test_an_extension_is_bounded_by_both_limits_and_names_the_most_allowed() -> None:
    host = example_host()
    now = STARTED + timedelta(hours=2, minutes=45)
    deadline = deadline_of(host, now)
    plan = {"reason": "eval", "actor": "arn:aws:iam::1:user/ana", "now": now}

    ok = plan_extension(
        host,
        deadline,
        by=timedelta(hours=1),
        max_exemption=timedelta(hours=2),
        ceiling=timedelta(hours=5),
        **plan,
    )  # type: ignore[arg-type]
    assert ok.until == STARTED + timedelta(hours=4)
    assert ok.tags()[tags.EXEMPT_UNTIL] == "2026-03-02T13:00:00Z"

    with pytest.raises(ExtensionRefused) as refused:
        plan_extension(
            host,
            deadline,
            by=timedelta(hours=3),
            max_exemption=timedelta(hours=2),
            ceiling=timedelta(hours=5),
            **plan,
        )  # type: ignore[arg-type]
    message = str(refused.value)
    assert (
        "exemption limit of 2h (PARKBRAKE_MAX_EXEMPTION, guardrails.max_exemption); the most allowed now is --by 1h45m"
        in message
    )
    assert (
        "runtime ceiling of 5h (PARKBRAKE_MAX_RUNTIME_CEILING, guardrails.max_runtime_ceiling); the most allowed is --by 2h"
        in message
    )
    assert refused.value.exit_code == 1


def test_an_extension_needs_a_reason_that_fits_a_tag() -> None:
    host = example_host()
    deadline = deadline_of(host, STARTED)
    for reason, expected in (
        ("  ", "--reason: required"),
        ("x" * 257, "--reason: 257 characters; at most 256"),
    ):
        with pytest.raises(InputError, match=expected):
            plan_extension(
                host,
                deadline,
                by=timedelta(hours=1),
                reason=reason,
                actor="a",
                now=STARTED,
                max_exemption=timedelta(hours=24),
                ceiling=timedelta(hours=24),
            )


def test_the_docs_show_the_extension_as_the_code_prints_it() -> None:
    from cli.oncall.deadlines.extend import describe
    from guardrails.settings import Settings

    warning = example_warning()
    extension = plan_extension(
        warning.host,
        warning.deadline,
        by=timedelta(hours=1),
        reason="eval finishing, ETA 40m",
        actor="arn:aws:sts::123456789012:assumed-role/ml-engineer/ana",
        now=warning.now + timedelta(minutes=3),
        max_exemption=timedelta(hours=24),
        ceiling=timedelta(hours=24),
    )
    shown = "\n".join(describe(extension, warning.host, Settings(stack="dev", regions=("us-east-1",))))
    assert shown in DOCS.read_text(), f"docs/owners.md should show, verbatim:\n{shown}"
    record = json.dumps(extension_decision(extension, warning.host).as_dict())
    assert record in DOCS.read_text(), f"docs/owners.md should show, verbatim:\n{record}"
    told = json.dumps(warning_decision(warning, actor="reaper", errors=[]).as_dict())
    assert told in DOCS.read_text(), f"docs/owners.md should show, verbatim:\n{told}"
