"""One module per policy rule, each exposing ``RULE``; ``policies.registry`` lists them."""
