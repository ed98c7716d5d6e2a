"""``parkbrake extend``: moving one host's deadline, with who, when and why recorded."""
