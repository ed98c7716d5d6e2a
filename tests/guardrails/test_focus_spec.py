"""guardrails.focus_spec: the FOCUS 1.2 and 1.3 column rules catch what a dataset row gets wrong, and
every row guardrails.focus writes, regular, late (a Correction, negative or not) or spot, passes them;
the 1.3-only columns say what the 1.3 specification's column files say (guardrails.focus_spec cites
them); every text cell is neutralised against spreadsheet formulas. The FinOps Foundation's
validator runs on a ledger's exports in tests/lambdas/ledger/test_focus_validator.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.csv_cells import FORMULA_STARTS
from guardrails.focus import COLUMNS, focus_decimal, focus_row, invoices_focus
from guardrails.focus_spec import FOCUS_VERSIONS, MANDATORY_COLUMNS, row_problems, spec_columns
from guardrails.invoice import Invoice, InvoiceLine

DECEMBER = (datetime(2036, 12, 1, tzinfo=UTC), datetime(2037, 1, 1, tzinfo=UTC))


def line(
    billed_ms: int = 60_000, usd_per_hour: Decimal | None = Decimal("1.006"), **changes: object
) -> InvoiceLine:
    fields: dict[str, object] = {
        "tenant": "research", "pool": "training", "instance_type": "g5.xlarge", "region": "us-east-1",
        "pricing_model": "on-demand", "usd_per_hour": usd_per_hour, "price_source": "prices.json",
        "price_valid_from": None, "billed_ms": billed_ms, "accelerator_ms": billed_ms // 2,
        "usd_hour_ms": (usd_per_hour or Decimal(0)) * billed_ms, "price_basis": "on-demand",
    }  # fmt: skip
    fields.update(changes)
    return InvoiceLine(**fields)  # type: ignore[arg-type]


def row(version: str = "1.2", **changes: Any) -> dict[str, str]:
    one = line(**changes)
    return focus_row(Invoice("research", *DECEMBER, (one,)), one, version)


@pytest.mark.parametrize("version", FOCUS_VERSIONS)
def test_every_column_written_is_a_focus_column_and_every_mandatory_one_is_written(version: str) -> None:
    written = set(COLUMNS[version]) - {"x_InvoiceStatus"}  # FOCUS's x_ prefix: a provider's own column
    assert written <= set(spec_columns(version))
    assert set(MANDATORY_COLUMNS) <= written
    assert "BillingAccountType" not in MANDATORY_COLUMNS
    assert row_problems(row(version), version) == []


def test_the_1_3_columns_say_what_the_1_3_column_files_say() -> None:
    newer, older = row("1.3"), row("1.2")
    # serviceprovidername.md: "Introduced as a replacement for ProviderName", MUST NOT be null; the
    # platform team re-bills the capacity as its own service (the reseller note), so it is parkbrake.
    assert newer["ServiceProviderName"] == newer["ProviderName"] == "parkbrake"
    # hostprovidername.md: the entity providing the underlying infrastructure, "MUST reflect the
    # name of the host provider when explicitly selected by the customer": the hosts are EC2's.
    assert newer["HostProviderName"] == "AWS"
    assert not {"ServiceProviderName", "HostProviderName"} & set(older)
    assert row_problems(newer | {"HostProviderName": ""}, "1.3") == ["HostProviderName: must not be null"]
    assert row_problems(newer | {"ServiceProviderName": ""}, "1.3") == [
        "ServiceProviderName: must not be null"
    ]
    missing = dict(newer)
    del missing["ServiceProviderName"]
    assert row_problems(missing, "1.3") == ["ServiceProviderName: mandatory column missing"]


@pytest.mark.parametrize("version", FOCUS_VERSIONS)
def test_the_tenant_pays_the_issuer_so_billed_cost_is_the_charge(version: str) -> None:
    # BilledCost-C-005-C (the Foundation's validator): BilledCost is 0 where ProviderName differs from
    # InvoiceIssuerName (payment received by a third party). parkbrake provides and issues.
    written = row(version)
    assert written["ProviderName"] == written["InvoiceIssuerName"] == "parkbrake"
    assert written["PublisherName"] == "AWS"
    assert written["BilledCost"] == written["EffectiveCost"] == written["ListCost"] == "0.016767"
    assert (written["InvoiceId"], written["x_InvoiceStatus"]) == ("research-2036-12", "final")
    # SkuPriceDetails-C-017-C and C-002-O: a key is FOCUS-defined (InstanceType) or x_-prefixed, PascalCase.
    keys = set(json.loads(written["SkuPriceDetails"]))
    assert keys == {"InstanceType", "x_PricingModel", "x_PriceBasis"}
    assert all(key.removeprefix("x_")[0].isupper() for key in keys)


def test_the_billing_period_is_the_month_not_the_moment_the_report_ran() -> None:
    one = line()
    running = Invoice(
        "research",
        DECEMBER[0],
        datetime(2036, 12, 5, 13, tzinfo=UTC),
        (one,),
        draft=True,
        billing_period=DECEMBER,
    )
    written = focus_row(running, one)
    assert (written["BillingPeriodStart"], written["BillingPeriodEnd"]) == (
        "2036-12-01T00:00:00Z",
        "2037-01-01T00:00:00Z",
    )
    assert written["ChargePeriodEnd"] == "2036-12-05T13:00:00Z"  # what is charged so far
    assert (written["InvoiceId"], written["x_InvoiceStatus"]) == ("research-2036-12", "draft")


@settings(max_examples=200, deadline=None)
@given(pool=st.text(min_size=1, max_size=12), cents=st.integers(min_value=-(10**6), max_value=10**6))
def test_no_text_cell_starts_a_formula_and_amounts_stay_numbers(pool: str, cents: int) -> None:
    for version in FOCUS_VERSIONS:
        written = row(version, pool=pool, billed_ms=cents * 1000, late=cents < 0, service_period="2036-11")
        types = spec_columns(version)
        for name, value in written.items():
            if name in types and types[name].data_type in ("Decimal", "DateTime"):
                assert not value.startswith("'"), (name, value)
            else:
                assert not value.startswith(FORMULA_STARTS), (name, value)
        assert json.loads(written["Tags"])["parkbrake:pool"] == pool  # the host's own tag, unaltered
        assert Decimal(written["BilledCost"]) == Decimal(line(billed_ms=cents * 1000).subtotal_usd)


def test_the_sub_account_is_the_aws_account_named_from_the_organisations_list() -> None:
    one = line(account="222233334444")
    invoice = Invoice("research", *DECEMBER, (one,))
    named = focus_row(invoice, one, "1.3", {"222233334444": "ml-prod"})
    assert (named["SubAccountId"], named["SubAccountName"], named["SubAccountType"]) == (
        "222233334444", "ml-prod", "AWS Account"
    )  # fmt: skip
    assert row_problems(named, "1.3") == []
    assert focus_row(invoice, one, "1.3")["SubAccountName"] == "222233334444"  # no list: the id
    # The ledger's own account before accounts were recorded (''): no sub account, all three null
    # together (subaccounttype.md: null exactly when SubAccountId is).
    own = row("1.3")
    assert (own["SubAccountId"], own["SubAccountName"], own["SubAccountType"]) == ("", "", "")
    assert row_problems(own, "1.3") == []
    assert json.loads(named["Tags"]) == {"parkbrake:pool": "training", "parkbrake:tenant": "research"}


def test_a_late_line_is_a_correction_charged_in_its_closed_month() -> None:
    late = row(billed_ms=-3_600_000, late=True, service_period="2036-11")
    assert row_problems(late) == []
    assert late["ChargeClass"] == "Correction"
    assert (late["ChargePeriodStart"], late["ChargePeriodEnd"]) == (
        "2036-11-01T00:00:00Z",
        "2036-12-01T00:00:00Z",
    )
    assert (late["BillingPeriodStart"], late["BilledCost"]) == ("2036-12-01T00:00:00Z", "-1.006000")


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"ChargeClass": "Late"}, "ChargeClass: 'Late' is not one of FOCUS's allowed values"),
        ({"BilledCost": "1E+2"}, "BilledCost: '1E+2' is not in FOCUS's numeric format"),
        ({"BilledCost": "-0.00"}, "BilledCost: '-0.00' is not in FOCUS's numeric format"),
        ({"BilledCost": ""}, "BilledCost: must not be null"),
        ({"ListUnitPrice": "-1"}, "ListUnitPrice: -1 must not be negative"),
        (
            {"ChargePeriodStart": "2036-12-01 00:00:00"},
            "ChargePeriodStart: '2036-12-01 00:00:00' is not YYYY-MM-DDTHH:mm:ssZ",
        ),
        ({"Tags": '{"a": [1]}'}, "Tags: '{\"a\": [1]}' is not a JSON object of scalar values"),
        (
            {"ListUnitPrice": ""},
            "ListUnitPrice: must not be null for a Usage charge that is not a Correction",
        ),
        ({"PricingUnit": ""}, "PricingUnit: must be null exactly when PricingQuantity is null"),
        (
            {"ServiceSubcategory": "Block Storage"},
            "ServiceSubcategory: 'Block Storage' is not under 'Compute'",
        ),
        ({"ListCost": "0.016800"}, "ListCost: 0.016800 is not ListUnitPrice x PricingQuantity"),
        ({"InvoiceIssuer": "parkbrake"}, "InvoiceIssuer: not a FOCUS 1.2 column"),
    ],
)
def test_a_row_that_breaks_a_rule_is_told_which(changes: dict[str, str], problem: str) -> None:
    assert problem in row_problems(row() | changes)
    assert problem in row_problems(row("1.3") | changes, "1.3") or "1.2 column" in problem


def test_a_missing_mandatory_column_is_named() -> None:
    broken = row()
    del broken["ChargeClass"]
    assert row_problems(broken) == ["ChargeClass: mandatory column missing"]


def test_a_correction_may_differ_from_unit_price_times_quantity() -> None:
    late = row(late=True, service_period="2036-11")
    assert row_problems(late | {"ListCost": "5"}) == []


def test_unpriced_lines_are_left_out_of_the_dataset() -> None:
    priced, unpriced = line(), line(usd_per_hour=None, price_basis=None)
    rows = invoices_focus([Invoice("research", *DECEMBER, (priced, unpriced))]).splitlines()
    assert len(rows) == 2  # the header and the priced line


@settings(max_examples=100, deadline=None)
@given(
    billed_ms=st.integers(min_value=-(10**12), max_value=10**12),
    cents=st.integers(min_value=0, max_value=10**7),
    spot=st.booleans(),
    late=st.booleans(),
)
def test_every_row_written_passes_the_rules(billed_ms: int, cents: int, spot: bool, late: bool) -> None:
    model = "spot" if spot else "on-demand"
    changes: dict[str, Any] = {
        "billed_ms": billed_ms, "usd_per_hour": Decimal(cents) / 1000, "pricing_model": model, "late": late,
        "service_period": "2036-11" if late else None,
    }  # fmt: skip
    written = row(**changes)
    assert row_problems(written) == []
    assert row_problems(row("1.3", **changes), "1.3") == []
    assert written["PricingCategory"] == ("Dynamic" if spot else "Standard")


def test_decimals_are_plain_digits_with_no_sign_on_zero() -> None:
    assert focus_decimal(Decimal("1E+2")) == "100"
    assert focus_decimal(Decimal("-0.000")) == "0.000"
    assert focus_decimal(Decimal("-1.5")) == "-1.5"
