"""Host-side guardrails: the job wrapper, the NVML agent, leaving the Auto Scaling group."""
