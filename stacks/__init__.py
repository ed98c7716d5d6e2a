"""parkbrake stacks."""
