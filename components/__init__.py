"""parkbrake components."""
