"""The PostgreSQL usage ledger: store, queries, migrations."""
