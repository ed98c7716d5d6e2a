"""``POST /v1/embeddings``: authentication, rate limit, the idempotency layer, then the model.

Independent of the HTTP server: a request is method, path, headers and body; a response is status,
headers and body bytes, exactly what the idempotency store keeps and replays. The server calls
:meth:`EmbeddingsApi.authorize` with the headers alone, before it reads the body, and
:meth:`EmbeddingsApi.serve` once the whole body has arrived.
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from guardrails.idempotency import (
    HEADER,
    REPLAYED_HEADER,
    STORED_HEADERS,
    InvalidIdempotencyKey,
    fingerprint,
    is_final,
    parse_key,
    wait_intervals,
)
from services.inference.fairness import LONG_RUN_TOKENS, LongRuns
from services.inference.idempotency import (
    Claim,
    IdempotencyStore,
    Outcome,
    ResponseTooLarge,
    Scope,
    StoredResponse,
    always_fits,
)
from services.inference.keys import ApiKeyStore, key_hash
from services.inference.leases import LeaseKeeper
from services.inference.metrics import ServiceMetrics
from services.inference.model import MAX_TOKENS, MODEL_NAME, Embedder, Embeddings
from services.inference.ratelimit import RateLimiter
from services.inference.settings import ServiceSettings

EMBEDDINGS_PATH = "/v1/embeddings"
MODEL_ALIASES = {MODEL_NAME, f"sentence-transformers/{MODEL_NAME}"}
DIMENSIONS = 384
JSON = "application/json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]  # keys lower-case
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": JSON})
    # Work the server does once the response is sent, before it counts the request out: storing it
    # for replays, so the store's round trip is not part of the client's wait.
    then: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def json(cls, status: int, document: object, **headers: str) -> Response:
        # backslashreplace: an error message may quote the caller's text, and a lone surrogate
        # ("\ud800", valid in JSON, not in UTF-8) goes out as the JSON escape it came in as.
        body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "backslashreplace"
        )
        return cls(
            status, body, {"Content-Type": JSON} | {name.replace("_", "-"): v for name, v in headers.items()}
        )

    @classmethod
    def error(
        cls, status: int, message: str, kind: str, *, param: str | None = None, **headers: str
    ) -> Response:
        """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
        document = {"error": {"message": message, "type": kind, "param": param, "code": kind}}
        return cls.json(status, document, **headers)


class BadRequest(Exception):
    def __init__(
        self, message: str, param: str | None = None, status: int = 400, kind: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


# How long an API key found valid may be taken as known before a request's body arrives, for a
# request with an Idempotency-Key: its claim checks the key again, in the same statement, once the
# body is in (so a revocation still holds at once); a key not seen valid this recently, or not at
# all, is looked up before the body.
VERIFIED_FOR_SECONDS = 60.0
VERIFIED_KEYS = 10_000  # at most this many remembered (the oldest go first)


@dataclass(frozen=True)
class Caller:
    """Who sent a request (from its API key), and its ``Idempotency-Key`` when it has one."""

    tenant: str
    key_id: str
    idempotency_key: str | None
    api_key: str = field(default="", repr=False)


@dataclass(frozen=True)
class Run:
    """A request admitted to the model: its tenant and body and, with an ``Idempotency-Key``, the claim
    it holds. The server runs it in a worker once the tenant has a free slot."""

    tenant: str
    body: bytes
    scope: Scope | None = None
    owner: Any = None
    # The LeaseKeeper's token: the claim is renewed from the moment it is won, so a request that
    # waits for its tenant's slot longer than a lease does not lose its claim to a retry meanwhile.
    held: int | None = None


@dataclass(frozen=True)
class Waiting:
    """A request whose ``Idempotency-Key`` another request holds and is running: it waits for that
    one's response off the workers (the server sleeps on its event loop between polls of the store)."""

    scope: Scope
    fingerprint: str
    body: bytes
    claim: Claim


Admitted = Response | Run | Waiting


class VerifiedKeys:
    """API keys found valid in the last ``VERIFIED_FOR_SECONDS``, by their hash: tenant and key id."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._found: dict[bytes, tuple[str, str, float]] = {}
        self._lock = threading.Lock()

    def get(self, api_key: str) -> tuple[str, str] | None:
        with self._lock:
            found = self._found.get(key_hash(api_key))
        if found is None or self._clock() - found[2] > VERIFIED_FOR_SECONDS:
            return None
        return found[0], found[1]

    def remember(self, api_key: str, tenant: str, key_id: str) -> None:
        with self._lock:
            digest = key_hash(api_key)
            self._found.pop(digest, None)
            self._found[digest] = (tenant, key_id, self._clock())
            while len(self._found) > VERIFIED_KEYS:
                del self._found[next(iter(self._found))]

    def forget(self, api_key: str) -> None:
        with self._lock:
            self._found.pop(key_hash(api_key), None)


def parse_embeddings_request(body: bytes, max_inputs: int) -> tuple[list[str], str]:
    """The inputs and the encoding format, or :class:`BadRequest` naming the field and the fix."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(
            'the body is not JSON; send {"model": "all-MiniLM-L6-v2", "input": "text"}'
        ) from None
    except RecursionError:  # json's C decoder recurses once per nesting level
        raise BadRequest(
            "the body is nested too deeply; a request is an object of strings and lists"
        ) from None
    if not isinstance(document, dict):
        raise BadRequest('the body must be a JSON object with "model" and "input"')
    model = document.get("model")
    if model is None:
        raise BadRequest(f"model is missing; use {MODEL_NAME!r}", "model")
    if not isinstance(model, str):
        raise BadRequest(f"model must be a string; use {MODEL_NAME!r}", "model")
    if model not in MODEL_ALIASES:
        raise BadRequest(
            f"model {model!r} is not served here; use {MODEL_NAME!r}", "model", 404, "model_not_found"
        )
    inputs = document.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(item, str) for item in inputs):
        raise BadRequest(
            "input must be a string or a non-empty list of strings (token arrays are not accepted)", "input"
        )
    if len(inputs) > max_inputs:
        raise BadRequest(f"input has {len(inputs)} items; at most {max_inputs} per request", "input")
    empty = [index for index, item in enumerate(inputs) if not item]
    if empty:
        raise BadRequest(f"input[{empty[0]}] is an empty string; every input needs text", "input")
    for index, item in enumerate(inputs):
        if not item.isascii():  # ASCII (nearly every input) cannot hold a surrogate: skip the check
            try:
                item.encode()
            except UnicodeEncodeError:
                raise BadRequest(
                    f"input[{index}] holds a lone UTF-16 surrogate (an unpaired \\ud800–\\udfff escape); "
                    "send text that is valid Unicode",
                    "input",
                ) from None
    if b"\\u" in body:  # only an escape can make a lone surrogate; most bodies have none
        try:
            json.dumps(document, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise BadRequest(
                "the body holds a lone UTF-16 surrogate (an unpaired \\ud800–\\udfff escape); send valid Unicode"
            ) from None
    encoding = document.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise BadRequest(f"encoding_format {encoding!r} is not float or base64", "encoding_format")
    dimensions = document.get("dimensions", DIMENSIONS)
    if dimensions != DIMENSIONS:
        raise BadRequest(f"dimensions must be {DIMENSIONS} for {MODEL_NAME} (or left out)", "dimensions")
    return inputs, encoding


class EmbeddingsApi:
    def __init__(
        self,
        *,
        settings: ServiceSettings,
        embedder: Callable[[], Embedder],
        keys: ApiKeyStore,
        store: IdempotencyStore,
        metrics: ServiceMetrics,
        now: Callable[[], datetime],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings, self._embedder, self._keys, self._store = settings, embedder, keys, store
        self.metrics, self._now, self._sleep = metrics, now, sleep
        self._limiter = RateLimiter(settings.rate_limit, settings.burst)
        self.leases = LeaseKeeper(store, settings.lease.lease, metrics, now)
        self.verified = VerifiedKeys()
        self.long_runs = LongRuns(settings.workers)

    def handle(self, request: Request) -> Response:
        """The whole request at once: :meth:`authorize`, then :meth:`serve`."""
        caller = self.authorize(request.headers)
        if isinstance(caller, Response):
            return caller
        return self.serve(caller, request)

    def authorize(self, headers: Mapping[str, str]) -> Caller | Response:
        """From the headers alone (the body is not read yet): the caller, or the response that refuses it.

        401 for no, a wrong or a revoked API key; 429 past the key's rate; 400 for an invalid (or,
        where required, a missing) ``Idempotency-Key``. None of these is stored: they are about the
        caller, not the request."""
        answer = self._authorize(headers, cached_only=False)
        assert answer is not None
        return answer

    def authorize_cached(self, headers: Mapping[str, str]) -> Caller | Response | None:
        """:meth:`authorize` when it needs no database round trip (no key, or an Idempotency-Key with
        a key verified within VERIFIED_FOR_SECONDS), else None: the event loop calls this first, so
        such a request skips a worker-thread hop (the lookup, when needed, runs in a worker)."""
        return self._authorize(headers, cached_only=True)

    def _authorize(self, headers: Mapping[str, str], *, cached_only: bool) -> Caller | Response | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        api_key = token.strip() if scheme.lower() == "bearer" else ""
        raw_key = headers.get(HEADER.lower())
        # With an Idempotency-Key, a key found valid within VERIFIED_FOR_SECONDS is taken as known
        # here: the claim after the body checks it again in the same statement (ADMIT), so the
        # request makes one round trip on its way in, as one without the header does.
        found = self.verified.get(api_key) if api_key and raw_key is not None else None
        if found is None and api_key:
            if cached_only:
                return None
            found = self._keys.tenant_of(api_key)
            if found is not None:
                self.verified.remember(api_key, *found)
        if found is None:
            return _unauthorized()
        tenant, key_id = found
        refusal = self._rate_limited(tenant, key_id)
        if refusal is not None:
            return refusal
        try:
            key = None if raw_key is None else parse_key(raw_key)
        except InvalidIdempotencyKey as error:
            return Response.error(400, str(error), "invalid_idempotency_key")
        if key is None and self.settings.require_idempotency_key:
            return Response.error(
                400,
                f"this service requires an {HEADER} header (a UUID per logical request)",
                "invalid_request_error",
            )
        return Caller(tenant, key_id, key, api_key)

    def serve(self, caller: Caller, request: Request) -> Response:
        """The whole body has arrived: :meth:`admit`, waiting in this thread while another request
        holds the key, then :meth:`run`. The HTTP server does the same steps but waits on its event
        loop, so a waiting request holds no worker."""
        outcome = self.admit(caller, request)
        intervals = iter(wait_intervals(self.settings.wait))
        while isinstance(outcome, Waiting):
            interval = next(intervals, None)
            if interval is None:
                return self.gave_up(outcome)
            self._sleep(interval)
            outcome = self.poll(outcome)
        return outcome if isinstance(outcome, Response) else self.run(outcome)

    def admit(self, caller: Caller, request: Request) -> Admitted:
        """The idempotency layer's way in (one round trip): a final response (a replay, 401, 422, 400),
        a :class:`Run`, or a :class:`Waiting` when another request holds the key."""
        if caller.idempotency_key is None:
            return Run(caller.tenant, request.body)
        endpoint = f"{request.method} {request.path}"
        try:
            request_fingerprint = fingerprint(request.method, request.path, request.body)
        except (RecursionError, UnicodeEncodeError):
            # JSON nested past the decoder's depth, or a lone surrogate the canonical form cannot
            # encode: no request can be made of it, so it is refused before a claim (and not stored).
            try:
                parse_embeddings_request(request.body, self.settings.max_inputs)
            except BadRequest as error:  # the field at fault, when it is one the request has
                return Response.error(error.status, str(error), error.kind, param=error.param)
            message = "the body holds a lone UTF-16 surrogate (an unpaired \\ud800–\\udfff escape); send valid Unicode"
            return Response.error(400, message, "invalid_request_error")
        admission = self._store.admit(
            caller.api_key, endpoint, caller.idempotency_key, request_fingerprint, self._now()
        )
        if admission is None:  # revoked since it was verified: refused now, nothing claimed
            self.verified.forget(caller.api_key)
            return _unauthorized()
        scope = Scope(admission.tenant, endpoint, caller.idempotency_key)
        return self._claimed(scope, request_fingerprint, request.body, admission.claim)

    def poll(self, waiting: Waiting) -> Admitted:
        """The key's claim again (one round trip): the stored response, the claim itself when the
        holder's lease lapsed, or still :class:`Waiting`."""
        claim = self._store.claim(waiting.scope, waiting.fingerprint, self._now())
        return self._claimed(waiting.scope, waiting.fingerprint, waiting.body, claim)

    def gave_up(self, waiting: Waiting) -> Response:
        """409 once ``PARKBRAKE_INFERENCE_WAIT`` has passed with the key still running elsewhere."""
        scope, claim = waiting.scope, waiting.claim
        self.metrics.conflicts.labels(scope.tenant, "in_progress").inc()
        left = (claim.lease_until - self._now()).total_seconds() if claim.lease_until else 1.0
        retry = str(max(1, min(math.ceil(left), math.ceil(self.settings.wait.total_seconds()))))
        message = f"a request with {HEADER} {scope.key!r} is still running; retry after {retry}s"
        return Response.error(409, message, "idempotency_key_in_use", Retry_After=retry)

    def run(self, work: Run) -> Response:
        """The model (blocking): under the request's claim when it has one."""
        if work.scope is None or work.held is None:
            return self._run(work.body, work.tenant)
        return self._run_claimed(work.scope, work.owner, work.held, work.body)

    def abandon(self, work: Run) -> None:
        """A claimed request that will not run (its server gave up on it before the model): the claim
        is released at once, so a retry runs it rather than waiting for the lease to lapse."""
        if work.scope is not None and work.held is not None:
            self.leases.drop(work.held)
            self._store.release(work.scope, work.owner)

    def _rate_limited(self, tenant: str, key_id: str) -> Response | None:
        """A 429 once the key is past its rate: before the idempotency layer, and never stored."""
        wait = self._limiter.acquire(key_id)
        if not wait:
            return None
        self.metrics.rate_limited.labels(tenant).inc()
        message = f"rate limit of {self.settings.rate_limit} requests/s per key reached; retry after {wait}s"
        return Response.error(429, message, "rate_limit_exceeded", Retry_After=str(wait))

    def _claimed(self, scope: Scope, request_fingerprint: str, body: bytes, claim: Claim) -> Admitted:
        if claim.outcome is Outcome.CLAIMED:
            assert claim.owner is not None
            return Run(scope.tenant, body, scope, claim.owner, self.leases.hold(scope, claim.owner))
        if claim.outcome is Outcome.REPLAY:
            assert claim.response is not None
            self.metrics.replays.labels(scope.tenant).inc()
            stored = claim.response
            return Response(stored.status, stored.body, stored.headers | {REPLAYED_HEADER: "true"})
        if claim.outcome is Outcome.MISMATCH:
            self.metrics.conflicts.labels(scope.tenant, "fingerprint_mismatch").inc()
            message = (
                f"{HEADER} {scope.key!r} was used with a different request; use a new key for a new request"
            )
            return Response.error(422, message, "idempotency_key_reused")
        return Waiting(scope, request_fingerprint, body, claim)

    def _run_claimed(self, scope: Scope, owner: Any, held: int, body: bytes) -> Response:
        # Renewed (since the claim was won) while the pass runs and until the response is stored
        # (after sending), so a concurrent retry waits for this result instead of running it again.
        try:
            response = self._run(body, scope.tenant)
        except BaseException:
            self.leases.drop(held)
            self._store.release(scope, owner)
            raise
        if not is_final(response.status):
            self.leases.drop(held)
            self._store.release(scope, owner)
            return response
        stored = StoredResponse(
            response.status, {k: v for k, v in response.headers.items() if k in STORED_HEADERS}, response.body
        )
        if not always_fits(len(stored.body), self.settings.max_stored_bytes):
            try:
                return self._store_before_sending(scope, owner, stored)
            finally:
                self.leases.drop(held)

        def store_after_sending() -> None:
            try:
                self._complete(scope, owner, stored)
            finally:
                self.leases.drop(held)

        return Response(stored.status, stored.body, dict(stored.headers), then=store_after_sending)

    def _store_before_sending(self, scope: Scope, owner: Any, stored: StoredResponse) -> Response:
        """A body that may not fit the store: what the client gets depends on storing it (413 if not)."""
        try:
            self._complete(scope, owner, stored)
        except ResponseTooLarge as error:
            refusal = Response.error(413, str(error), "response_too_large")
            self._complete(scope, owner, StoredResponse(413, {"Content-Type": JSON}, refusal.body))
            return refusal
        return Response(stored.status, stored.body, dict(stored.headers))

    def _complete(self, scope: Scope, owner: Any, stored: StoredResponse) -> None:
        if not self._store.complete(scope, owner, stored, self._now()):
            self.metrics.lost_claims.inc()

    def _run(self, body: bytes, tenant: str) -> Response:
        try:
            inputs, encoding = parse_embeddings_request(body, self.settings.max_inputs)
        except BadRequest as error:
            return Response.error(error.status, str(error), error.kind, param=error.param)
        ceiling = self.settings.max_request_tokens
        most = most_tokens(inputs)
        if most > ceiling:  # decided from the texts' lengths: refusing costs no tokenizing
            message = (
                f"input may hold up to {most} tokens (one per byte of text and two per input, at most "
                f"{MAX_TOKENS} per input after truncation); at most {ceiling} per request "
                "(PARKBRAKE_INFERENCE_MAX_REQUEST_TOKENS): split it into several requests"
            )
            return Response.error(400, message, "invalid_request_error", param="input")
        embedder = self._embedder()
        started = time.perf_counter()
        size = self.settings.batch_size

        def batches() -> list[Embeddings]:
            # Batches of a configured size: memory and a pass's length are bounded by a batch, and
            # padding is to the longest input of its batch, not of the whole request.
            return [embedder.embed(inputs[start : start + size]) for start in range(0, len(inputs), size)]

        results = self.long_runs.run(batches) if most > LONG_RUN_TOKENS else batches()
        elapsed = time.perf_counter() - started
        self.metrics.model_passes.inc()
        self.metrics.gpu_seconds.labels(tenant, embedder.device).inc(elapsed)
        vectors = (vector for result in results for vector in result.vectors)
        data = [
            {"object": "embedding", "index": index, "embedding": _encode(vector, encoding)}
            for index, vector in enumerate(vectors)
        ]
        tokens = sum(result.tokens for result in results)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return Response.json(200, {"object": "list", "data": data, "model": MODEL_NAME, "usage": usage})


# [CLS] and [SEP], which the tokenizer adds to every input.
SPECIAL_TOKENS = 2


def most_tokens(inputs: list[str]) -> int:
    """The most tokens ``inputs`` can make, from their lengths alone: BERT's WordPiece tokens each
    cover at least one character of the normalised text, which has no more characters than the text
    has UTF-8 bytes (the normaliser only lower-cases and strips accents: tokenizer.json's
    BertNormalizer), plus the two special tokens; at most MAX_TOKENS an input after truncation."""
    return sum(
        min(MAX_TOKENS, (len(text) if text.isascii() else len(text.encode())) + SPECIAL_TOKENS)
        for text in inputs
    )


def _unauthorized() -> Response:
    message = "a valid API key is required: Authorization: Bearer KEY (`parkbrake keys create`)"
    return Response.error(401, message, "invalid_api_key", WWW_Authenticate="Bearer")


def _encode(vector: Any, encoding: str) -> list[float] | str:
    if encoding == "base64":  # OpenAI's: little-endian float32 bytes
        return base64.b64encode(vector.astype("<f4").tobytes()).decode()
    # tolist() converts the float32 values to the same Python floats as float() on each, in one C loop.
    return vector.tolist()
