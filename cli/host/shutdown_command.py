"""The command that shuts a GPU host down, by default and by variable: here, not in the job wrapper,
so the options every command shares (``cli/options.py``) do not import the wrapper and all it uses."""

from guardrails.settings_table import SHUTDOWN_COMMAND

DEFAULT_SHUTDOWN_COMMAND = "shutdown -h now"
SHUTDOWN_COMMAND_VARIABLE = SHUTDOWN_COMMAND
