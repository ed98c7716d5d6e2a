"""The organisation's account list in c7n-org's shape: c7n-org's own examples parse, every problem is
named by its path, and no input makes the parser fail with anything but the project's input error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardrails.accounts import Account, AccountListError, accounts_selected, load_accounts, parse_accounts
from guardrails.errors import InputError

# c7n-org's README (tools/c7n_org/README.md at df800e9e94d0860e0d8fbfebd9bc5b9b2d50367d), verbatim: the
# AWS example (its "..." is YAML's end-of-document marker) and the vars example.
README_AWS_EXAMPLE = """\
accounts:
- account_id: '123123123123'
  name: account-1
  regions:
  - us-east-1
  - us-west-2
  role: arn:aws:iam::123123123123:role/CloudCustodian
  vars:
    charge_code: xyz
  tags:
  - type:prod
  - division:some division
  - partition:us
  - scope:pci
...
"""
README_VARS_EXAMPLE = """\
accounts:
- account_id: '123123123123'
  name: account-1
  role: arn:aws:iam::123123123123:role/CloudCustodian
  vars:
    charge_code: xyz
"""
# What `c7n-org aws-accounts` writes (tools/c7n_org/c7n_org/cli.py, aws_accounts): a role name, email.
GENERATED = """\
vars:
  charge_code: shared
  team: platform
accounts:
- account_id: '210987654321'
  email: ml@example.com
  name: ml-research
  role: CloudCustodian
  tags: [path:/ml, type:research]
  vars: {team: ml}
- account_id: '012345678901'
  name: ml-prod
  profile: ml-prod-admin
  regions: [all]
  tags: [type:prod]
- account_id: '111122223333'
  name: chained
  role:
  - arn:aws:iam::999988887777:role/hub
  - arn:aws:iam::111122223333:role/parkbrake-deployer
  external_id: s3cret
  org_id: o-abc123
  guardrail_tier: gold
"""


def problems_of(text: str) -> list[str]:
    with pytest.raises(AccountListError) as raised:
        load_accounts(text, "accounts.yml")
    return [str(problem) for problem in raised.value.problems]


def test_c7n_orgs_readme_examples_parse() -> None:
    (account,) = load_accounts(README_AWS_EXAMPLE)
    assert account == Account(
        account_id="123123123123",
        name="account-1",
        role_chain=("arn:aws:iam::123123123123:role/CloudCustodian",),
        regions=("us-east-1", "us-west-2"),
        tags=("type:prod", "division:some division", "partition:us", "scope:pci"),
        variables={"charge_code": "xyz"},
    )
    (with_vars,) = load_accounts(README_VARS_EXAMPLE)
    assert (with_vars.regions, with_vars.variables) == ((), {"charge_code": "xyz"})


def test_what_c7n_org_allows_is_read_as_c7n_org_reads_it() -> None:
    research, prod, chained = load_accounts(GENERATED)
    # A bare role name is a role in the account itself (c7n-org's accounts_iterator).
    assert research.role_chain == ("arn:aws:iam::210987654321:role/CloudCustodian",)
    assert research.email == "ml@example.com"
    # The organisation's vars are merged in, the account's own winning (c7n-org's _update).
    assert research.variables == {"team": "ml", "charge_code": "shared"}
    assert prod.variables == {"charge_code": "shared", "team": "platform"}
    assert (prod.profile, prod.role_chain, prod.regions) == ("ml-prod-admin", (), ("all",))
    assert prod.account_id == "012345678901"  # quoted: the leading zero kept
    assert chained.role_chain == (
        "arn:aws:iam::999988887777:role/hub",
        "arn:aws:iam::111122223333:role/parkbrake-deployer",
    )
    assert (chained.external_id, chained.org_id) == ("s3cret", "o-abc123")
    assert chained.extra == {"guardrail_tier": "gold"}  # c7n-org allows any other key


def test_a_name_defaults_to_the_account_id() -> None:
    (account,) = load_accounts("accounts: [{account_id: '123456789012', role: Custodian}]")
    assert account.name == "123456789012"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("accounts:\n- {name: a, role: R0le}",
         "accounts[0].account_id: is required: the 12-digit AWS account id, quoted ('123456789012')"),
        ("accounts:\n- {account_id: '12345', role: R0le}",
         "accounts[0].account_id: '12345' is not a 12-digit AWS account id — quote all 12 digits ('123456789012')"),
        ("accounts:\n- {account_id: 123456789012, role: R0le}",
         "accounts[0].account_id: 123456789012 is a number, not a string: quote it ('012345678901'); YAML "
         "drops an unquoted id's leading zeros, and c7n-org's schema wants a string too"),
        ("accounts:\n- {account_id: '123456789012'}",
         "accounts[0].role: is required unless a profile is given (c7n-org's anyOf)"),
        ("accounts:\n- {account_id: '123456789012', role: ab}",
         "accounts[0].role: 'ab' is not a role ARN or a role name of 3 characters or more"),
        ("accounts:\n- {account_id: '123456789012', role: 'team/Custodian'}",
         "accounts[0].role: 'team/Custodian' is not a role name; give the role's ARN"),
        ("accounts:\n- {account_id: '123456789012', role: 'arn:aws:iam::1:role/x'}",
         "accounts[0].role: 'arn:aws:iam::1:role/x' is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)"),
        ("accounts:\n- {account_id: '123456789012', role: ['arn:aws:iam::123456789012:role/a', 7]}",
         "accounts[0].role[1]: 7 is not a role ARN (arn:aws:iam::ACCOUNT:role/NAME)"),
        ("accounts:\n- {account_id: '123456789012', role: {a: 1}}",
         "accounts[0].role: {'a': 1} is not a role ARN, a role name or a list of role ARNs"),
        ("accounts:\n- {account_id: '123456789012', profile: ab}",
         "accounts[0].profile: 'ab' is not a string of at least 3 characters"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, regions: us-east-1}",
         "accounts[0].regions: 'us-east-1' is not a list of strings"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, regions: [us-east-1, moon]}",
         "accounts[0].regions[1]: 'moon' is not an AWS region (us-east-1, or all)"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, tags: [type:prod, 3]}",
         "accounts[0].tags[1]: 3 is not a string"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, vars: [a]}",
         "accounts[0].vars: must be a mapping of names to values"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, email: 5}",
         "accounts[0].email: 5 is not a string"),
        ("accounts:\n- {account_id: '123456789012', role: R0le, 3: x}",
         "accounts[0].3: a key must be a string"),
        ("accounts:\n- just-a-name", "accounts[0]: must be a mapping (c7n-org's account list: accounts: [...]), not str"),
        ("accounts: []", "accounts: must be a non-empty list of accounts"),
        ("vars: 3", "vars: must be a mapping of names to values"),
        ("", "(top): is empty; an account list is a mapping (accounts: [...])"),
        ("- a", "(top): must be a mapping (c7n-org's account list: accounts: [...]), not list"),
        ("projects: [{project_id: p}]", "projects: parkbrake guards AWS accounts only; give them under accounts:"),
        ("policies: []", "policies: unknown key; allowed here: accounts, vars"),
        ("vars: {a: 1}", "accounts: is required (a list of accounts, c7n-org's shape)"),
    ],
)  # fmt: skip
def test_every_problem_is_named_by_its_path(text: str, expected: str) -> None:
    assert expected in problems_of(text)


def test_every_problem_is_reported_at_once() -> None:
    text = """\
subscriptions: []
accounts:
- {account_id: '123456789012', role: R0le}
- {account_id: '12345', role: R0le, regions: [moon]}
- {account_id: '123456789012', role: R0le, name: other}
- {account_id: '210987654321', role: R0le, name: '123456789012'}
"""
    assert problems_of(text) == [
        "subscriptions: parkbrake guards AWS accounts only; give them under accounts:",
        "accounts[1].account_id: '12345' is not a 12-digit AWS account id — quote all 12 digits ('123456789012')",
        "accounts[1].regions[0]: 'moon' is not an AWS region (us-east-1, or all)",
        "accounts[2].account_id: '123456789012' is already accounts[0]'s; each account is listed once, "
        "by a name of its own",
        # accounts[0]'s name defaulted to its id: a second account may not take it.
        "accounts[3].name: '123456789012' is already accounts[0]'s; each account is listed once, "
        "by a name of its own",
    ]


def test_the_message_names_the_file_and_counts_the_problems() -> None:
    with pytest.raises(InputError) as raised:
        load_accounts(
            "accounts:\n- {account_id: '1', role: R0le}\n- {account_id: '2', role: R0le}", "org.yml"
        )
    assert str(raised.value).splitlines()[0] == "org.yml has 2 problems:"
    assert raised.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("accounts: [", "org.yml is not valid YAML: expected the node content, but found '<stream end>' (line 1, column 12)"),
        ("a: 1\na: 2", 'org.yml is not valid YAML: found duplicate key "a" with value "2" (original value: "1") (line 2, column 1)'),
        ("when: 2001-13-45", "org.yml is not valid YAML: month must be in 1..12"),
    ],
)  # fmt: skip
def test_text_that_is_not_yaml_is_one_line(text: str, expected: str) -> None:
    with pytest.raises(InputError) as raised:
        load_accounts(text, "org.yml")
    assert str(raised.value) == expected


# ----- selection: c7n-org's -a, -t and --not-accounts


@pytest.fixture(name="organisation")
def organisation_fixture() -> tuple[Account, ...]:
    return load_accounts(GENERATED)


def names(accounts: tuple[Account, ...]) -> list[str]:
    return [account.name for account in accounts]


def test_selection_by_name_or_id_and_by_all_tags(organisation: tuple[Account, ...]) -> None:
    assert names(accounts_selected(organisation)) == ["ml-research", "ml-prod", "chained"]
    assert names(accounts_selected(organisation, ["ml-prod", "111122223333"])) == ["ml-prod", "chained"]
    assert names(accounts_selected(organisation, ["ml-prod,chained"])) == ["ml-prod", "chained"]
    assert names(accounts_selected(organisation, tags=["type:prod"])) == ["ml-prod"]
    # Every tag given must be present (c7n-org's filter_accounts).
    assert names(accounts_selected(organisation, tags=["type:research", "path:/ml"])) == ["ml-research"]
    assert names(accounts_selected(organisation, excluded=["ml-research", "012345678901"])) == ["chained"]


def test_a_selection_that_misses_is_refused(organisation: tuple[Account, ...]) -> None:
    with pytest.raises(
        InputError, match=r"^ml-prdo: no such account name or id in the account list \(names: "
    ):
        accounts_selected(organisation, ["ml-prdo"])
    with pytest.raises(InputError, match=r"^no account selected by all of the tags type:prod, path:/ml$"):
        accounts_selected(organisation, tags=["type:prod", "path:/ml"])
    with pytest.raises(InputError, match=r"^no account selected by names ml-prod; not ml-prod$"):
        accounts_selected(organisation, ["ml-prod"], excluded=["ml-prod"])


# ----- garbage: parsed, or refused as bad input; never another exception

keys = st.sampled_from(
    [
        "accounts",
        "vars",
        "projects",
        "account_id",
        "name",
        "role",
        "profile",
        "regions",
        "tags",
        "external_id",
        "x",
    ]
)
text = st.text(max_size=20)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | text
    | st.sampled_from(
        ["123456789012", "012345678901", "arn:aws:iam::123456789012:role/r", "us-east-1", "all"]
    )
)
structures = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys | text, inner, max_size=5),
    max_leaves=20,
)
near_valid = st.fixed_dictionaries(
    {"accounts": st.lists(st.dictionaries(keys, structures, max_size=6), max_size=4)},
    optional={"vars": structures, "x": structures},
)
yaml_ish = st.sampled_from(
    [
        "accounts:",
        "- ",
        ": ",
        "{",
        "}",
        "[",
        "]",
        "'",
        '"',
        "&a ",
        "*a",
        "!!",
        "\n",
        "  ",
        "#",
        "...",
        "---",
        "? ",
    ]
)


def refused_or_parsed(run: Any) -> None:
    """Parsed, or refused as input with a message the user can act on; any other exception fails."""
    try:
        run()
    except InputError as error:
        refusal: InputError | None = error
    else:
        refusal = None
    if refusal is not None:
        assert str(refusal)
        assert "\n" not in str(refusal) or isinstance(refusal, AccountListError)


@settings(max_examples=200, deadline=None)
@given(st.one_of(structures, near_valid))
def test_any_structure_parses_or_is_refused_as_input(document: object) -> None:
    refused_or_parsed(lambda: parse_accounts(document))
    refused_or_parsed(lambda: load_accounts(json.dumps(document, ensure_ascii=True)))


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.lists(yaml_ish | text, max_size=30).map("".join)))
def test_any_text_parses_or_is_refused_as_input(document: str) -> None:
    refused_or_parsed(lambda: load_accounts(document))


@pytest.mark.parametrize("depth", [50, 500])
def test_deep_nesting_is_refused_as_input(depth: int) -> None:
    with pytest.raises(InputError):
        load_accounts("accounts: " + "[" * depth + "]" * depth)
