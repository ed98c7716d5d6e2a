"""On-call engines the commands drive: blue-green deploys, revision checks, emergency park, fleet status, nightly schedules, stack-file edits."""
