"""Every malformed input of ``tests/error_cases.py`` gets a ``ValueError`` naming its argument,
and ``docs/errors.md`` (rendered from the same list) is up to date."""

import pytest
from error_cases import CASES, DOC_PATH, render


@pytest.mark.parametrize("case", CASES, ids=[f"{c.where}: {c.what}" for c in CASES])
def test_malformed_input_gets_a_value_error_naming_the_argument(case):
    with pytest.raises(case.error) as info:
        case.call()
    assert f"`{case.argument}`" in str(info.value), str(info.value)


def test_error_table_has_enough_cases():
    assert len(CASES) >= 40
    assert len({(c.where, c.what) for c in CASES}) == len(CASES)


def test_docs_errors_md_is_current():
    with open(DOC_PATH) as fh:
        published = fh.read()
    assert published == render(), "docs/errors.md is out of date: run `PYTHONPATH=. python tests/error_cases.py`"
