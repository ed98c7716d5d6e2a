"""The guardrails' engines: what each Lambda does, one module per engine, below the six handlers
(``lambdas/<handler>.py``, entry points only) and above the AWS and ledger adapters (:mod:`lambdas.aws`,
:mod:`lambdas.ledger`). The CLI runs the same engines in-process; nothing imports a handler module."""
