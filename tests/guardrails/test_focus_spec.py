"""guardrails.focus_spec: the FOCUS 1.2 column rules catch what a dataset row gets wrong, and every
row guardrails.focus writes, regular, late (a Correction, negative or not) or spot, passes them."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardrails.focus import COLUMNS, focus_decimal, focus_row, invoices_focus
from guardrails.focus_spec import MANDATORY_COLUMNS, SPEC_COLUMNS, row_problems
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


def row(**changes: object) -> dict[str, str]:
    one = line(**changes)
    return focus_row(Invoice("research", *DECEMBER, (one,)), one)


def test_every_column_written_is_a_focus_column_and_every_mandatory_one_is_written() -> None:
    assert set(COLUMNS) <= set(SPEC_COLUMNS)
    assert set(MANDATORY_COLUMNS) <= set(COLUMNS)
    assert "BillingAccountType" not in MANDATORY_COLUMNS
    assert row_problems(row()) == []


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


@given(
    billed_ms=st.integers(min_value=-(10**12), max_value=10**12),
    cents=st.integers(min_value=0, max_value=10**7),
    spot=st.booleans(),
    late=st.booleans(),
)
def test_every_row_written_passes_the_rules(billed_ms: int, cents: int, spot: bool, late: bool) -> None:
    model = "spot" if spot else "on-demand"
    written = row(
        billed_ms=billed_ms, usd_per_hour=Decimal(cents) / 1000, pricing_model=model, late=late,
        service_period="2036-11" if late else None,
    )  # fmt: skip
    assert row_problems(written) == []
    assert written["PricingCategory"] == ("Dynamic" if spot else "Standard")


def test_decimals_are_plain_digits_with_no_sign_on_zero() -> None:
    assert focus_decimal(Decimal("1E+2")) == "100"
    assert focus_decimal(Decimal("-0.000")) == "0.000"
    assert focus_decimal(Decimal("-1.5")) == "-1.5"
