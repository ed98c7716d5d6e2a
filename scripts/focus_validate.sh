#!/usr/bin/env bash
# The FinOps Foundation's FOCUS validator (focus-validator on PyPI, 2.2 or newer) on parkbrake's FOCUS
# exports, in its own Python 3.12 virtualenv outside the project's (the validator needs Python >= 3.12;
# nothing of it enters .venv).
#
#   scripts/focus_validate.sh --install            create the virtualenv (again only when missing)
#   scripts/focus_validate.sh FILE VERSION [RULES]  validate FILE as FOCUS VERSION (1.2 or 1.3)
#
# 1.2 is validated with the rules the validator ships (model-1.2.0.1.json) and --block-download (CI
# reaches no GitHub). Newer rules are a directory of model-X.Y.json files (RULES, or
# $FOCUS_RULES_DIR) passed as --rule-set-path; without one a 1.3 file is not validated (exit 3).
# Exit 0 when no rule fails; 1 (printing the failures) otherwise; the summary line always.
# Where the virtualenv lives: $FOCUS_VALIDATOR_VENV (default ~/.cache/parkbrake/focus-validator);
# which Python: $FOCUS_PYTHON, else pyenv's 3.12, else python3.12.
set -euo pipefail

VENV="${FOCUS_VALIDATOR_VENV:-${HOME}/.cache/parkbrake/focus-validator}"
# focus-validator 2.2.1 declares numpy<2 while the newest pyarrow needs numpy 2: pyarrow<21 is the
# newest that imports with it.
REQUIREMENTS=("focus-validator>=2.2" "pyarrow<21")
# What parkbrake's charges have (the validator's ApplicabilityCriteria in model-1.2.0.1.json): the
# rules that depend on them run instead of being skipped. Not PUBLIC_PRICE_LIST_SUPPORTED: the engine
# takes a rule when any one of its criteria is given (focus_validator/config_objects/
# focus_to_duckdb_converter.py, "Include rule if any of its criteria match"), which would demand the
# virtual-currency and pricing-currency columns of CostAndUsage-D-046..057-C as well.
APPLICABLE="${FOCUS_APPLICABLE:-REGION_SUPPORTED,SUB_ACCOUNT_SUPPORTED,TAGGING_SUPPORTED,USAGE_MEASUREMENT_SUPPORTED,UNIT_PRICING_SUPPORTED,MULTIPLE_PRICING_CATEGORIES_SUPPORTED,ACCOUNT_NAMING_SUPPORTED}"
EXPECTED="$(dirname "$0")/focus_validator_expected.txt"  # the validator's own false failures, explained

python312() {
    local candidate pyenv_root
    local candidates=("${FOCUS_PYTHON:-}")
    pyenv_root="$(pyenv root 2>/dev/null || true)"
    if [[ -n "${pyenv_root}" ]]; then
        candidates+=("${pyenv_root}"/versions/3.12.*/bin/python)
    fi
    candidates+=(python3.12)
    for candidate in "${candidates[@]}"; do
        [[ -n "${candidate}" ]] || continue
        if "${candidate}" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then
            echo "${candidate}"
            return 0
        fi
    done
    echo "focus_validate: no Python 3.12 found (set FOCUS_PYTHON, or install one with pyenv install 3.12)" >&2
    return 2
}

install() {
    if [[ -x "${VENV}/bin/focus-validator" ]]; then
        return 0
    fi
    local python
    python="$(python312)"
    "${python}" -m venv "${VENV}"
    "${VENV}/bin/python" -m pip install --quiet --upgrade pip
    "${VENV}/bin/python" -m pip install --quiet "${REQUIREMENTS[@]}"
}

validate() {
    local file version rules site report
    file="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
    version="$2"
    rules="${3:-${FOCUS_RULES_DIR:-}}"
    local args=(--data-file "${file}" --validate-version "${version}" --block-download
                --applicability-criteria "${APPLICABLE}" --show-violations)
    if [[ -n "${rules}" ]]; then
        args+=(--rule-set-path "$(cd "${rules}" && pwd)")
    elif [[ "${version}" != "1.2" ]]; then
        echo "focus_validate: no rules for FOCUS ${version} at hand (give a directory with model-${version}.json)" >&2
        return 3
    fi
    site="$("${VENV}/bin/python" -c 'import focus_validator, os; print(os.path.dirname(os.path.dirname(focus_validator.__file__)))')"
    report="$(mktemp)"
    # The validator reads its currency codes from focus_validator/rules/currency_codes.csv relative to
    # the working directory (focus_validator/utils/download_currency_codes.py): run it from its site.
    (cd "${site}" && "${VENV}/bin/focus-validator" "${args[@]}") >"${report}" 2>&1 || true
    local summary
    summary="$(grep -m1 -E '^Total: [0-9]+ \| Pass: [0-9]+ \| Fail: [0-9]+ \| Skipped: [0-9]+' "${report}" || true)"
    if [[ -z "${summary}" ]]; then
        cat "${report}" >&2
        rm -f "${report}"
        echo "focus_validate: the validator printed no summary for ${file}" >&2
        return 1
    fi
    echo "FOCUS ${version} $(basename "${file}"): ${summary}"
    local failed unexpected
    failed="$(grep -oE '^❌ [A-Za-z0-9-]+: FAIL' "${report}" | awk '{print $2}' | tr -d ':' | sort -u || true)"
    unexpected="$(comm -23 <(echo "${failed}" | sed '/^$/d') <(grep -v '^#' "${EXPECTED}" | sed '/^$/d' | sort -u))"
    if [[ -n "${failed}" ]]; then
        echo "  failed as expected (scripts/focus_validator_expected.txt): $(comm -12 <(echo "${failed}") <(grep -v '^#' "${EXPECTED}" | sort -u) | tr '\n' ' ')"
    fi
    if [[ -n "${unexpected}" ]]; then
        echo "focus_validate: rules failed: $(echo "${unexpected}" | tr '\n' ' ')" >&2
        grep -A4 -F -f <(echo "${unexpected}" | sed 's/^/- /') "${report}" | head -80 >&2 || true
        rm -f "${report}"
        return 1
    fi
    rm -f "${report}"
}

case "${1:-}" in
    --install) install ;;
    --venv) echo "${VENV}" ;;
    "" | -h | --help) sed -n '2,15p' "$0" ;;
    *)
        [[ $# -ge 2 ]] || { echo "usage: $0 FILE VERSION [RULES_DIR]" >&2; exit 2; }
        [[ -x "${VENV}/bin/focus-validator" ]] || { echo "focus_validate: run $0 --install first" >&2; exit 2; }
        validate "$@"
        ;;
esac
