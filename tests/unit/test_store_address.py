"""Where a launcher reaches the rendezvous store: an address chosen once, so that no later connection
asks a resolver (store_address.py), and torch's own decisions from the name left as they were."""

from __future__ import annotations

import pytest

from torchx_ext.launcher.rendezvous.store_address import chosen_address, endpoint_at


def never(address: str) -> bool:
    raise AssertionError(f"{address} probed where one address was enough")


@pytest.mark.parametrize("host", ["10.0.0.7", "::1", "[fe80::1]"])
def test_an_address_in_the_endpoint_is_kept(host: str) -> None:
    assert chosen_address(host, hosts_store=False, addresses=[], answers=never) is None


def test_a_name_with_one_address_is_reached_at_it() -> None:
    assert chosen_address("job-store-0", False, ["10.1.2.3", "10.1.2.3"], never) == "10.1.2.3"


def test_the_launcher_that_hosts_the_store_reaches_it_on_loopback() -> None:
    assert chosen_address("node-0.cluster", True, [], never) == "127.0.0.1"
    assert chosen_address("localhost", False, ["::1", "127.0.0.1"], never) == "127.0.0.1"


def test_of_several_addresses_the_first_that_answers_is_chosen_and_none_keeps_the_name() -> None:
    assert chosen_address("store", False, ["fd00::5", "10.0.0.5"], lambda address: address == "10.0.0.5") == "10.0.0.5"
    assert chosen_address("store", False, ["fd00::5", "10.0.0.5"], lambda address: False) is None


def test_a_name_that_does_not_resolve_is_kept() -> None:
    assert chosen_address("store", False, [], never) is None


def test_the_endpoint_keeps_its_port_and_brackets_an_ipv6_address() -> None:
    assert endpoint_at("store:29500", "10.0.0.5") == "10.0.0.5:29500"
    assert endpoint_at("store", "fd00::5") == "[fd00::5]:29400"
    assert endpoint_at("store:1", None) == "store:1"
