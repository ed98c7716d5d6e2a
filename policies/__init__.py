"""parkbrake policies."""
