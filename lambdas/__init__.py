"""parkbrake lambdas."""
