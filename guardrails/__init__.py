"""parkbrake guardrails."""
