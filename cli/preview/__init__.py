"""The offline plan: the Pulumi program under mocks, its cost and its policy verdicts."""
