"""The sweep's rules, one per module; :mod:`guardrails.rules.registry` lists the ones in force."""
