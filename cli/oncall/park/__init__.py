"""``parkbrake park`` / ``unpark``: the reviewed switch in the stack file, the ``--now`` emergency path, and
the records the emergency path leaves in AWS."""
