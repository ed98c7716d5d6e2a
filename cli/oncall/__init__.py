"""On-call engines the commands drive, one sub-package each (``deploy``, ``fleet``, ``park``, ``nightly``,
``deadlines``), and the helpers more than one command shares (regions, stack-file edits and inventory,
terminal tables, threads, the paused collector, Lambda code run in-process)."""
