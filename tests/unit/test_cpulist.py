from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.numa.cpulist import format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8,10-11", {0, 1, 2, 3, 8, 10, 11}),
        ("5\n", {5}),
        ("\n", set()),
        ("", set()),
        (" 0 - 1 , 4 ", {0, 1, 4}),
        ("0-15:2/4", {0, 1, 4, 5, 8, 9, 12, 13}),
    ],
)
def test_parses_kernel_cpulists(text: str, cpus: set[int]) -> None:
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", ["x", "0-", "-3", "3-1", "1,,2", "0-3:", "0-7:0/4", "0-7:5/4", "1.5", "0x3", ",", "²", "1-²"])
def test_malformed_cpulists_name_the_text_and_the_valid_forms(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        parse_cpulist(text, source="--allowed-cpus")
    assert repr(text) in str(error.value)
    assert "--allowed-cpus" in str(error.value)
    assert "0-3,8,10-11" in str(error.value)


def test_formats_shortest_ranges() -> None:
    assert format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    assert format_cpulist([]) == ""


@given(st.sets(st.integers(min_value=0, max_value=600)))
def test_format_then_parse_is_identity(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus
