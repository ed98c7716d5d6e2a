"""Stopped and metered in one ledger, end to end (docs/organisation.md): a GPU host in member account
B runs past its cap; the hub's central sweep (the reaper's handler with the spokes parameter) stops
it through B's spoke role; the EC2 state changes of its start and its stop, as B's spoke forwards them
to the hub bus, reach the hub's meter handler; the one ledger then holds B's interval from the start
to the stop and the sweep's decision about it, and the hub's invoice shows B's usage beside the hub
account's own.

On moto's server: ``sts:AssumeRole`` into another account id acts in that account
(moto/sts/models.py), so B's hosts are B's, invisible to the hub's own clients. The events are EC2's
native ``EC2 Instance State-change Notification`` (guardrail_fleet.state_change): a rule whose target
is another bus delivers the event itself, its envelope's ``account`` and ``region`` still the host's
(the spoke's rule forwards the pattern the hub's rule matches, components/org_spoke_parts.py
STATE_CHANGE_FORWARD; docs/ledger.md, *Accounts*). The clock of each delivery is a hand-set one, not
time's: the sweep stops the host 100 minutes after its launch."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from guardrail_fleet import STACK, client_factory, launch, launch_time, managed_tags, state_change
from test_meter import lambda_environment  # noqa: F401  (the meter handler's environment, a fixture)
from test_organisation_invoice import invoke

from guardrails import names
from guardrails.ledger import to_ms
from lambdas import meter, reaper
from lambdas.aws.decision_log import DecisionLog
from lambdas.aws.spoke_list import SpokeList
from lambdas.ledger.decisions import DecisionLedger
from lambdas.ledger.store import LedgerStore
from tests.lambdas.test_org_sweep import HUB, PARAMETER, B, OrgFleet, hub_settings, spoke_ec2

REGION = "us-east-1"
METER_ARN = f"arn:aws:lambda:{REGION}:{HUB}:function:{names.function_name(STACK, 'meter')}"


def seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)  # an event's time has whole seconds


@pytest.mark.usefixtures("lambda_environment")
def test_a_member_accounts_host_stopped_by_the_hub_is_metered_from_start_to_stop_beside_the_hubs_own(
    aws: str, store: LedgerStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = client_factory(aws)
    fleet = OrgFleet(hub)  # B's us-east-1 host fleet.due is past its 90m cap at fleet.now
    monkeypatch.setenv("PARKBRAKE_SPOKES_PARAMETER", PARAMETER)  # the hub's meter learns A, B and C
    monkeypatch.setattr(meter, "CONTAINER_SPOKES", SpokeList())
    clock = [fleet.now]
    monkeypatch.setattr(meter, "utc_now", lambda: clock[0])
    (ours,) = launch(hub("ec2", REGION), "g5.xlarge", managed_tags(max_runtime="4h"))
    due_started = seconds(launch_time(spoke_ec2(B, REGION), fleet.due))
    ours_started = seconds(launch_time(hub("ec2", REGION), ours))

    def deliver(instance_id: str, state: str, at: datetime, account: str) -> dict[str, object]:
        clock[0] = at + timedelta(seconds=5)  # EventBridge hands it over a few seconds later
        return meter.handler(state_change(instance_id, state, at, region=REGION, account=account),
                             SimpleNamespace(invoked_function_arn=METER_ARN))  # fmt: skip

    assert deliver(fleet.due, "running", due_started, B)["inserted"] == 1
    assert deliver(ours, "running", ours_started, HUB)["inserted"] == 1

    ledger = DecisionLog(guardrail="reaper", origin="sweep", ledger=lambda: DecisionLedger.of(store))
    result = reaper.handle({}, settings=hub_settings(), clients=hub, now=fleet.now, decisions=ledger)
    assert result["stopped"] == [fleet.due]
    assert fleet.state_of(B, REGION, fleet.due) in ("stopping", "stopped")  # seen by B itself

    hub("ec2", REGION).stop_instances(InstanceIds=[ours])  # the hub's own host, stopped by its owner
    assert deliver(ours, "stopping", ours_started + timedelta(minutes=60), HUB)["inserted"] == 1
    assert deliver(fleet.due, "stopping", fleet.now, B)["inserted"] == 1
    assert deliver(fleet.due, "stopped", fleet.now + timedelta(seconds=40), B)["inserted"] == 1

    intervals = {interval.instance_id: interval for interval in store.intervals()}
    theirs = intervals[fleet.due]
    assert (theirs.account, theirs.started_ms, theirs.ended_ms) == (B, to_ms(due_started), to_ms(fleet.now))
    assert intervals[ours].account == HUB
    (stop,) = [
        d.decision for d in DecisionLedger.of(store).read(instance_id=fleet.due) if d.decision.kind == "stop"
    ]
    assert stop.details["account_id"] == B  # the stop and the usage, in the one ledger

    window = [
        "--since",
        (due_started - timedelta(hours=1)).isoformat(),
        "--until",
        (fleet.now + timedelta(hours=1)).isoformat(),
    ]
    report = invoke("ledger", "report", *window, "--output", "json")
    assert report.exit_code == 0, report.output
    lines = [line for item in json.loads(report.stdout)["tenants"] for line in item["invoice"]["lines"]]
    by_account = {line["account"]: (line["accelerator_seconds"], line["subtotal_usd"]) for line in lines}
    # One tenant's invoice, two accounts: B's 100 minutes (launch to the sweep's stop) and the hub's
    # own hour, each of g5.xlarge at $1.006/h (the price table's).
    assert by_account == {B: ("6000.000", "1.676667"), HUB: ("3600.000", "1.006000")}
