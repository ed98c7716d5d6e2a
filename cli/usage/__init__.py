"""Engines of ``parkbrake ledger``: ingest, reports and invoices, budgets and runway."""
