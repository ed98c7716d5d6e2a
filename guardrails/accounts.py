"""The organisation's account list, in c7n-org's shape, so that a list written for c7n-org works here.

The shape is c7n-org's ``CONFIG_SCHEMA`` and ``accounts_iterator`` (cloud-custodian,
``tools/c7n_org/c7n_org/cli.py``, and ``tools/c7n_org/README.md``, read at commit
df800e9e94d0860e0d8fbfebd9bc5b9b2d50367d):

- a mapping whose ``accounts:`` is a list; beside it only ``vars:`` (the organisation's variables,
  merged into each account's, the account's own winning) and c7n-org's other providers'
  ``subscriptions:``/``projects:``/``tenancies:``, which parkbrake refuses: it guards AWS accounts;
- each account: ``account_id`` (a string of 12 digits, required), ``name``, ``regions`` (a list),
  ``role`` (an ARN, a bare role name c7n-org turns into ``arn:aws:iam::<account_id>:role/<name>``, or a
  list of ARNs: a chain assumed in order), ``profile`` (an alternative to ``role``: one of the two is
  required), ``external_id``, ``tags`` (a list of strings, c7n-org's ``type:prod``), ``vars`` (a
  mapping), ``email``, ``display_name``, ``org_id``; c7n-org allows any other key too
  (``additionalProperties: True``), kept here in :attr:`Account.extra` and otherwise ignored.

Stricter than c7n-org where c7n-org would fail later: a name defaults to the account id (as c7n-org's
other providers do; its AWS runner reads ``name`` unchecked), two accounts may share neither an id nor
a name, a region must look like one (or be ``all``), and each role of a chain must be a role ARN.

Parsing checks the whole document and reports every problem with its path at once, as the stack
file's validation does. Pure: no AWS SDK; the YAML reader is imported when text is parsed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from guardrails.errors import InputError, Problem, ProblemsError

UPSTREAM = "cloud-custodian tools/c7n_org/c7n_org/cli.py at df800e9e94d0860e0d8fbfebd9bc5b9b2d50367d"
ACCOUNT_ID = re.compile(r"[0-9]{12}")
# The shape of stacks/config.py's region check (us-east-1, us-gov-west-1, cn-north-1, us-iso-east-1).
REGION_NAME = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d")
ALL_REGIONS = "all"  # c7n-org's word for every region the account has enabled
ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/\S+")
TOP_LEVEL_KEYS = ("accounts", "vars")
OTHER_PROVIDERS = ("subscriptions", "projects", "tenancies")
STRING_KEYS = ("name", "email", "display_name", "org_id", "external_id")
KNOWN_KEYS = frozenset(("account_id", "regions", "role", "profile", "tags", "vars", *STRING_KEYS))
PROFILE_MIN_LENGTH = 3  # c7n-org's schema: profile minLength 3, a role string minLength 3


@dataclass(frozen=True)
class Account:
    """One member account as the organisation's list gives it."""

    account_id: str
    name: str
    role_chain: tuple[str, ...] = ()  # role ARNs, assumed in order; empty when a profile is given
    profile: str | None = None
    external_id: str | None = None
    regions: tuple[str, ...] = ()  # empty: not given (c7n-org then runs in us-east-1 and us-west-2)
    tags: tuple[str, ...] = ()
    variables: Mapping[str, Any] = field(default_factory=dict)  # c7n-org's ``vars``, the org's merged in
    email: str | None = None
    display_name: str | None = None
    org_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # other keys c7n-org allows; unread


AccountProblem = Problem  # one thing wrong in an account list, at its path


class AccountListError(ProblemsError):
    """An account list with one or more problems, each with its path in the YAML."""


def load_accounts(text: str, source: str = "accounts file") -> tuple[Account, ...]:
    """The accounts of a c7n-org account list's YAML text; :class:`InputError` for anything wrong."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError, YAMLFutureWarning

    try:
        document = YAML(typ="safe", pure=True).load(text)
    except (YAMLError, YAMLFutureWarning) as error:
        raise InputError(f"{source} is not valid YAML: {_yaml_problem(error)}") from None
    except (ValueError, TypeError, OverflowError) as error:
        # A scalar YAML types but Python cannot build (a timestamp of month 13, a huge float).
        raise InputError(f"{source} is not valid YAML: {error}") from None
    except RecursionError:
        raise InputError(f"{source} is nested too deeply to be an account list") from None
    return parse_accounts(document, source)


def parse_accounts(document: object, source: str = "accounts file") -> tuple[Account, ...]:
    """The accounts of an already loaded account list, every problem reported at once."""
    problems: list[AccountProblem] = []
    if not isinstance(document, Mapping):
        raise AccountListError(source, [AccountProblem("(top)", _need_mapping(document))])
    for key in document:
        if key in OTHER_PROVIDERS:
            problems.append(
                AccountProblem(str(key), "parkbrake guards AWS accounts only; give them under accounts:")
            )
        elif key not in TOP_LEVEL_KEYS:
            problems.append(
                AccountProblem(_key(key), f"unknown key; allowed here: {', '.join(TOP_LEVEL_KEYS)}")
            )
    organisation_vars = document.get("vars")
    if organisation_vars is not None and not _is_string_keyed(organisation_vars):
        problems.append(AccountProblem("vars", "must be a mapping of names to values"))
        organisation_vars = None
    raw_accounts = document.get("accounts")
    if raw_accounts is None:
        if not problems:
            problems.append(AccountProblem("accounts", "is required (a list of accounts, c7n-org's shape)"))
        raise AccountListError(source, problems)
    if not isinstance(raw_accounts, list) or not raw_accounts:
        problems.append(AccountProblem("accounts", "must be a non-empty list of accounts"))
        raise AccountListError(source, problems)
    accounts = [
        _account(raw, f"accounts[{index}]", organisation_vars or {}, problems)
        for index, raw in enumerate(raw_accounts)
    ]
    _duplicates(accounts, problems)
    if problems:
        raise AccountListError(source, problems)
    return tuple(account for account in accounts if account is not None)


def accounts_selected(
    accounts: Sequence[Account],
    names: Iterable[str] = (),
    tags: Iterable[str] = (),
    excluded: Iterable[str] = (),
) -> tuple[Account, ...]:
    """c7n-org's ``-a NAME``, ``-t TAG`` and ``--not-accounts`` (``filter_accounts``): an account is
    kept when ``names`` is empty or holds its name or id, it carries every one of ``tags``, and
    ``excluded`` holds neither its name nor its id. Each option may also be comma-separated.

    Unlike c7n-org, a name or id that matches no account is refused rather than silently running on
    fewer accounts, and so is a selection that keeps none."""
    wanted, required, skipped = _comma_expand(names), _comma_expand(tags), _comma_expand(excluded)
    known = {account.name for account in accounts} | {account.account_id for account in accounts}
    unknown = [name for name in (*wanted, *skipped) if name not in known]
    if unknown:
        raise InputError(
            f"{', '.join(unknown)}: no such account name or id in the account list "
            f"(names: {', '.join(account.name for account in accounts)})"
        )
    selected = tuple(
        account
        for account in accounts
        if (not wanted or account.name in wanted or account.account_id in wanted)
        and account.name not in skipped
        and account.account_id not in skipped
        and all(tag in account.tags for tag in required)
    )
    if not selected:
        asked = [
            f"{what} {', '.join(values)}"
            for what, values in (("names", wanted), ("all of the tags", required), ("not", skipped))
            if values
        ]
        raise InputError(f"no account selected by {'; '.join(asked)}")
    return selected


def _comma_expand(values: Iterable[str]) -> list[str]:
    """c7n-org's ``comma_expand``: ``a,b`` is two values; order kept, duplicates dropped."""
    expanded = [part.strip() for value in values for part in value.split(",")]
    return list(dict.fromkeys(part for part in expanded if part))


def _account(
    raw: object, path: str, organisation_vars: Mapping[str, Any], problems: list[AccountProblem]
) -> Account | None:
    if not isinstance(raw, Mapping):
        problems.append(AccountProblem(path, _need_mapping(raw)))
        return None
    before = len(problems)
    for key in raw:
        if not isinstance(key, str):
            problems.append(AccountProblem(f"{path}.{_key(key)}", "a key must be a string"))
    account_id = _account_id(raw.get("account_id"), f"{path}.account_id", problems)
    strings = {key: _string(raw.get(key), f"{path}.{key}", problems) for key in STRING_KEYS}
    profile = _string(raw.get("profile"), f"{path}.profile", problems, PROFILE_MIN_LENGTH)
    role_chain = _role_chain(raw.get("role"), account_id, f"{path}.role", problems)
    if raw.get("role") is None and raw.get("profile") is None:
        problems.append(
            AccountProblem(f"{path}.role", "is required unless a profile is given (c7n-org's anyOf)")
        )
    regions = _strings(raw.get("regions"), f"{path}.regions", problems)
    for index, region in enumerate(regions):
        if region != ALL_REGIONS and REGION_NAME.fullmatch(region) is None:
            problems.append(
                AccountProblem(
                    f"{path}.regions[{index}]", f"{region!r} is not an AWS region (us-east-1, or all)"
                )
            )
    tags = _strings(raw.get("tags"), f"{path}.tags", problems)
    own_vars = raw.get("vars")
    if own_vars is not None and not _is_string_keyed(own_vars):
        problems.append(AccountProblem(f"{path}.vars", "must be a mapping of names to values"))
        own_vars = None
    if len(problems) > before:
        return None
    return Account(
        account_id=account_id,
        name=strings["name"] or account_id,
        role_chain=role_chain,
        profile=profile,
        external_id=strings["external_id"],
        regions=tuple(regions),
        tags=tuple(tags),
        variables={**organisation_vars, **(own_vars or {})},
        email=strings["email"],
        display_name=strings["display_name"],
        org_id=strings["org_id"],
        extra={key: value for key, value in raw.items() if key not in KNOWN_KEYS},
    )


def _account_id(value: object, path: str, problems: list[AccountProblem]) -> str:
    if value is None:
        problems.append(
            AccountProblem(path, "is required: the 12-digit AWS account id, quoted ('123456789012')")
        )
    elif isinstance(value, int) and not isinstance(value, bool):
        problems.append(
            AccountProblem(
                path,
                f"{_show(value)} is a number, not a string: quote it ('012345678901'); YAML drops an unquoted "
                "id's leading zeros, and c7n-org's schema wants a string too",
            )
        )
    elif not isinstance(value, str) or ACCOUNT_ID.fullmatch(value) is None:
        problems.append(
            AccountProblem(
                path,
                f"{_show(value)} is not a 12-digit AWS account id — quote all 12 digits ('123456789012')",
            )
        )
    else:
        return value
    return ""


def _string(value: object, path: str, problems: list[AccountProblem], min_length: int = 1) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value.strip()) < min_length:
        need = "a string" if min_length == 1 else f"a string of at least {min_length} characters"
        problems.append(AccountProblem(path, f"{_show(value)} is not {need}"))
        return None
    return value


def _strings(value: object, path: str, problems: list[AccountProblem]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(AccountProblem(path, f"{_show(value)} is not a list of strings"))
        return []
    good: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, str) and item.strip():
            good.append(item)
        else:
            problems.append(AccountProblem(f"{path}[{index}]", f"{_show(item)} is not a string"))
    return good


def _role_chain(value: object, account_id: str, path: str, problems: list[AccountProblem]) -> tuple[str, ...]:
    """c7n-org's ``role``: a string (an ARN, or a role name in the account itself) or a chain of ARNs."""
    if value is None:
        return ()
    if isinstance(value, str):
        if len(value.strip()) < PROFILE_MIN_LENGTH:
            problems.append(
                AccountProblem(
                    path, f"{_show(value)} is not a role ARN or a role name of 3 characters or more"
                )
            )
            return ()
        if value.startswith("arn"):  # c7n-org's own test, in accounts_iterator
            return _role_arns([value], path, problems, single=True)
        if "/" in value or ":" in value or any(c.isspace() for c in value):
            problems.append(AccountProblem(path, f"{_show(value)} is not a role name; give the role's ARN"))
            return ()
        return (f"arn:aws:iam::{account_id}:role/{value}",)
    if isinstance(value, list) and value:
        return _role_arns(value, path, problems, single=False)
    problems.append(
        AccountProblem(path, f"{_show(value)} is not a role ARN, a role name or a list of role ARNs")
    )
    return ()


def _role_arns(
    values: list[Any], path: str, problems: list[AccountProblem], *, single: bool
) -> tuple[str, ...]:
    good: list[str] = []
    for index, item in enumerate(values):
        at = path if single else f"{path}[{index}]"
        if isinstance(item, str) and ROLE_ARN.fullmatch(item):
            good.append(item)
        else:
            problems.append(
                AccountProblem(at, f"{_show(item)} is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
            )
    return tuple(good)


def _duplicates(accounts: list[Account | None], problems: list[AccountProblem]) -> None:
    """Two entries for one account, or one name for two, would make selection and the ledger ambiguous."""
    first_by_id: dict[str, int] = {}
    first_by_name: dict[str, int] = {}
    for index, account in enumerate(accounts):
        if account is None:
            continue
        for value, seen, what in (
            (account.account_id, first_by_id, "account_id"),
            (account.name, first_by_name, "name"),
        ):
            if value in seen:
                problems.append(
                    AccountProblem(
                        f"accounts[{index}].{what}",
                        f"{value!r} is already accounts[{seen[value]}]'s; each account is listed once, by a name of its own",
                    )
                )
            else:
                seen[value] = index


def _is_string_keyed(value: object) -> bool:
    return isinstance(value, Mapping) and all(isinstance(key, str) for key in value)


def _yaml_problem(error: Exception) -> str:
    """The reader's complaint and where, in one line (its own message spans several)."""
    lines = str(error).strip().splitlines()
    problem = getattr(error, "problem", None) or (lines[0] if lines else type(error).__name__)
    mark = getattr(error, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return f"{problem}{where}"


def _need_mapping(value: object) -> str:
    if value is None:
        return "is empty; an account list is a mapping (accounts: [...])"
    return f"must be a mapping (c7n-org's account list: accounts: [...]), not {type(value).__name__}"


def _key(key: object) -> str:
    return key if isinstance(key, str) else repr(key)


def _show(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an integer past Python's digit limit for str()
        return f"a {type(value).__name__}"
    return text if len(text) <= 60 else f"{text[:57]}..."
