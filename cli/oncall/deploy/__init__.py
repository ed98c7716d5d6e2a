"""Blue-green deploys, ``deploy --abort``, ``rollback`` and ``verify``: the phases, the surge host, the
colours' health and traffic, and the checks that prove which revision a service runs."""
