"""``parkbrake status`` and the exporter's AWS readings: the fleet read from AWS, and its view for people."""
