"""The service's Prometheus metrics, in a registry of its own (one per server, so tests can run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._declare_idempotency()
        self._declare_traffic()
        self._declare_load()
        self._declare_retention()

    def _declare_idempotency(self) -> None:
        """Model runs, and what the idempotency layer replayed, refused or could not store."""
        self.model_passes = Counter(
            "parkbrake_inference_model_passes",
            "Model runs (one per request that reached the model; a replay is not one).",
            registry=self.registry,
        )
        self.replays = Counter(
            "parkbrake_inference_idempotent_replays",
            "Responses replayed from the idempotency store instead of running the model.",
            ["tenant"],
            registry=self.registry,
        )
        self.conflicts = Counter(
            "parkbrake_inference_idempotency_conflicts",
            "Requests refused by the idempotency layer: in_progress (409) or fingerprint_mismatch (422).",
            ["tenant", "reason"],
            registry=self.registry,
        )
        self.lost_claims = Counter(
            "parkbrake_inference_idempotency_lost_claims",
            "Results not stored because the claim's lease lapsed and another request took it over.",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "parkbrake_inference_idempotency_store_errors",
            "Responses sent but not stored for replay (the store failed after the response went out).",
            registry=self.registry,
        )
        self.lease_renewal_errors = Counter(
            "parkbrake_inference_idempotency_lease_renewal_errors",
            "Renewals of a running request's claim that failed (the store was unreachable).",
            registry=self.registry,
        )
        self.lease_renewals = Counter(
            "parkbrake_inference_idempotency_lease_renewals",
            "Leases of running requests renewed (a request that ran past a third of the lease).",
            registry=self.registry,
        )
        self.aborted_uploads = Counter(
            "parkbrake_inference_aborted_uploads",
            "Requests whose body never arrived whole (the client hung up or stalled): nothing ran.",
            ["reason"],
            registry=self.registry,
        )

    def _declare_traffic(self) -> None:
        """Requests by route, tenant and status: refusals, latency, model time."""
        self.rate_limited = Counter(
            "parkbrake_inference_rate_limited",
            "Requests refused with 429.",
            ["tenant"],
            registry=self.registry,
        )
        self.requests = Counter(
            "parkbrake_inference_requests",
            "Responses by route and status.",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "parkbrake_inference_request_duration_seconds",
            "Time from request to response, by route.",
            ["route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.gpu_seconds = Counter(
            "parkbrake_inference_gpu_seconds",
            "Seconds the model ran for each tenant (device=gpu on an accelerator, cpu otherwise).",
            ["tenant", "device"],
            registry=self.registry,
        )

    def _declare_load(self) -> None:
        """What the service is doing now, and whether it is ready."""
        self.in_flight = Gauge(
            "parkbrake_inference_in_flight_requests", "Requests being served now.", registry=self.registry
        )
        self.busy_workers = Gauge(
            "parkbrake_inference_busy_workers",
            "Worker threads doing a request's database or model work now (at most WORKERS).",
            registry=self.registry,
        )
        self.waiting = Gauge(
            "parkbrake_inference_waiting_requests",
            "Requests waiting on the event loop, holding no worker: for the response of another request "
            "with their Idempotency-Key (idempotency_key), or for a slot of their tenant's (tenant_slot).",
            ["reason"],
            registry=self.registry,
        )
        self.ready = Gauge(
            "parkbrake_inference_ready",
            "1 when the model is loaded and warm and not draining.",
            registry=self.registry,
        )

    def _declare_retention(self) -> None:
        """The retention sweep of stored responses."""
        self.swept = Counter(
            "parkbrake_inference_idempotency_swept",
            "Stored responses deleted after their retention.",
            registry=self.registry,
        )
        self.sweep_errors = Counter(
            "parkbrake_inference_idempotency_sweep_errors",
            "Retention sweeps that failed (the database was unreachable).",
            registry=self.registry,
        )
