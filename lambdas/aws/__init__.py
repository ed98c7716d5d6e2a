"""AWS adapters the handlers and the CLI share: clients, the stop path, deadline schedules, heartbeats."""
