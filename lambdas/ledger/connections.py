"""Where the ledger's database is, and connections to it (psycopg 3).

Where the database is: ``PARKBRAKE_DATABASE_URL``, or the secret named by
``PARKBRAKE_DATABASE_SECRET_ARN`` (RDS's JSON secret, or a URL). A Lambda keeps one connection per
container (:class:`SingleConnection`, reconnecting when it breaks); long-running processes use a
``psycopg_pool`` pool (:class:`PooledConnections`). A database that cannot be reached raises
:class:`LedgerUnavailable`, which the CLI prints as one line and which makes the meter fail, so
that EventBridge delivers the event again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from guardrails.errors import InputError, ParkbrakeError
from guardrails.settings import DATABASE_SECRET_ARN, DATABASE_URL, database_location

CONNECT_TIMEOUT_S = 5


class LedgerUnavailable(ParkbrakeError):
    """The database cannot be reached or used; nothing was written."""


class LedgerNotMigrated(LedgerUnavailable):
    """The database answers but lacks the ledger's tables or functions (never migrated, or migrated by
    an older parkbrake): the user runs the migration. A LedgerUnavailable still, so a meter fails and its
    event is delivered again once the schema is there."""

    exit_code = 2


# What a statement meets in a database without the ledger's schema, or with an older one.
MISSING_SCHEMA = (
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
)


def database_url(environ: Mapping[str, str], secrets: Callable[[], Any] | None = None) -> str:
    """``PARKBRAKE_DATABASE_URL``, else the Secrets Manager secret ``PARKBRAKE_DATABASE_SECRET_ARN``.

    ``secrets`` makes the Secrets Manager client only when it is needed.
    """
    url, secret_arn = database_location(environ)
    if url:
        return checked_url(url, DATABASE_URL)
    if not secret_arn:
        raise ParkbrakeError(
            f"no ledger database configured: set {DATABASE_URL} (postgresql://user:password@host/db) "
            f"or {DATABASE_SECRET_ARN}"
        )
    if secrets is None:
        from lambdas.clients import client

        secrets = lambda: client("secretsmanager")  # noqa: E731
    text = secrets().get_secret_value(SecretId=secret_arn)["SecretString"]
    return checked_url(url_from_secret(text), DATABASE_SECRET_ARN)


# What libpq reads differently from the URL's writer when it stands unescaped in a user or password:
# libpq's URI parser (src/interfaces/libpq/fe-connect.c, conninfo_uri_parse_options, REL_17) takes the
# user information to the first '@' and only when no '/' comes before it. '?', '#' and ':' after the
# first one are read as part of the password, so they need no escape.
MISREAD_IN_USER_INFO = {"/": "%2F", "@": "%40"}
URL_SCHEMES = ("postgresql", "postgres")


def checked_url(url: str, source: str) -> str:
    """``url`` if psycopg's own parser (``conninfo_to_dict``) reads it as written; an InputError naming
    ``source`` otherwise, with the password masked.

    A ``postgresql://`` URL whose user or password holds an unescaped ``/`` or ``@`` is read by libpq
    otherwise than it was written: the password becomes a host, a port or a database name, which then
    appears in every error. Such a URL is refused before anything connects, and the escape named.
    """
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        raise InputError(
            f"{source}: {masked_url(url)} is not a PostgreSQL URL or conninfo psycopg can read; "
            "percent-encode any of % @ / in the user or password"
        ) from None
    user_info = _url_user_info(url)
    misread = [char for char in MISREAD_IN_USER_INFO if user_info is not None and char in user_info]
    if misread:
        escapes = " and ".join(f"'{char}' as {MISREAD_IN_USER_INFO[char]}" for char in misread)
        raise InputError(
            f"{source}: the user or password in {masked_url(url)} (all before its last '@') holds a "
            f"character libpq reads as the end of the user information; percent-encode it: {escapes}"
        )
    return url


def _url_user_info(url: str) -> str | None:
    """A ``postgresql://`` URL's user information as its writer meant it: all before the *last* ``@``
    (an unescaped ``@`` or ``/`` in a password is the case that matters); None without one."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in URL_SCHEMES or "@" not in rest:
        return None
    return rest.rpartition("@")[0]


def masked_url(url: str) -> str:
    """The URL (or conninfo) as an error may show it: the password replaced by ``***`` whatever it holds.

    A URL's user information runs to its *last* ``@``, whatever reserved characters (escaped or not)
    come before it; the user is shown only when it is plain, and the query (which may carry a
    ``password=``) and fragment never. A conninfo's ``password=`` is masked by psycopg's parser.
    """
    scheme, separator, rest = url.partition("://")
    if not separator or scheme not in URL_SCHEMES:  # libpq's own test: uri_prefix_length in fe-connect.c
        try:
            parts = conninfo_to_dict(url)
        except psycopg.ProgrammingError:
            return "(a conninfo psycopg cannot read)"
        return " ".join(f"{key}={'***' if key == 'password' else value}" for key, value in parts.items())
    user_info, at, location = rest.rpartition("@")
    location = location.split("?", 1)[0].split("#", 1)[0]
    if not at:
        return f"{scheme}://{location}"
    user, colon, _ = user_info.partition(":")
    if not user or any(char in user for char in "/?#@%"):
        return f"{scheme}://***@{location}"
    return f"{scheme}://{user}{':***' if colon else ''}@{location}"


def url_from_secret(text: str) -> str:
    """A URL secret as is; RDS's JSON secret (username, password, host, port, dbname) as a conninfo."""
    if not text.lstrip().startswith("{"):
        return text.strip()
    secret = json.loads(text)
    if "url" in secret:
        return str(secret["url"])
    fields = {"user": secret.get("username"), "password": secret.get("password"), "host": secret.get("host")}
    fields |= {"port": secret.get("port"), "dbname": secret.get("dbname")}
    return make_conninfo("", **{key: str(value) for key, value in fields.items() if value is not None})


def describe_target(url: str) -> str:
    """``user@host:port/dbname`` without the password, for error messages."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return f"(unparsable {DATABASE_URL})"
    host = parts.get("host") or "localhost"
    return f"{parts.get('user', '')}@{host}:{parts.get('port', 5432)}/{parts.get('dbname', '')}".lstrip("@")


def _unavailable(url: str, error: Exception) -> LedgerUnavailable:
    detail = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    try:
        password = str(conninfo_to_dict(url).get("password") or "")
    except psycopg.ProgrammingError:
        password = ""
    if password:  # libpq's messages may quote what it took for a host or a user; never the password
        detail = detail.replace(password, "***")
    return LedgerUnavailable(
        f"cannot use the ledger database {describe_target(url)}: {detail}; "
        f"check {DATABASE_URL} (or {DATABASE_SECRET_ARN}) and that the server is up"
    )


def _not_migrated(url: str) -> LedgerNotMigrated:
    return LedgerNotMigrated(
        f"the ledger at {masked_url(url)} has no schema (or an older one): run parkbrake ledger migrate"
    )


class Connections(Protocol):
    def connection(self) -> Any:
        """A context manager yielding an autocommit ``psycopg.Connection``."""
        ...

    def close(self) -> None: ...


@contextmanager
def joined_transaction(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """A transaction, or the caller's when the connection is in one already (the budget check decides
    a Workload in one: its lookup, the admit and the decision's log entry commit together). Not a
    savepoint: that costs two round trips, and rolls back less only for a caller that catches an
    error and goes on in the same transaction, which no caller of these does (an error rolls the
    caller's whole transaction back)."""
    if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        yield
        return
    with connection.transaction():
        yield


# SQLSTATE invalid_password and invalid_authorization_specification: the credentials, not the server.
LOGIN_FAILURES = frozenset({"28P01", "28000"})


def is_login_failure(error: psycopg.OperationalError) -> bool:
    return error.sqlstate in LOGIN_FAILURES or "password authentication failed" in str(error)


class SingleConnection:
    """One connection, made on first use and remade when broken: what a Lambda container keeps.

    ``reread`` gives the current URL again (from the Secrets Manager secret): RDS rotates the master
    password every seven days, so a login that fails is retried once with the credentials read anew.
    """

    def __init__(self, url: str, *, reread: Callable[[], str] | None = None) -> None:
        self.url = url
        self._reread = reread
        self._connection: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as error:
            if self._reread is None or not is_login_failure(error):
                raise
            self.url = self._reread()
            return psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            if self._connection is None or self._connection.closed or self._connection.broken:
                self._connection = self._connect()
            yield self._connection
        except MISSING_SCHEMA as error:
            raise _not_migrated(self.url) from error
        except psycopg.OperationalError as error:
            raise _unavailable(self.url, error) from error

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


class PooledConnections:
    """A ``psycopg_pool`` pool for processes that live long and serve many requests (exporter, CLI)."""

    def __init__(
        self, url: str, *, max_size: int = 4, timeout: float = CONNECT_TIMEOUT_S * 2, check: bool = True
    ) -> None:
        """``check``: a round trip on every checkout finds connections the server closed before they are
        used. Without it a dead connection fails the one statement that meets it (as
        :class:`LedgerUnavailable`) and the pool drops it: for a request path that answers 503 and counts
        its round trips."""
        self.url = url
        self._pool: ConnectionPool[Any] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            check=ConnectionPool.check_connection if check else None,
            open=False,
            timeout=timeout,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except PoolTimeout as error:
            self._pool.close()
            raise _unavailable(url, error) from error

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._pool.connection() as connection:
                yield connection
        except MISSING_SCHEMA as error:
            raise _not_migrated(self.url) from error
        except (psycopg.OperationalError, PoolTimeout) as error:
            raise _unavailable(self.url, error) from error

    def close(self) -> None:
        self._pool.close()
