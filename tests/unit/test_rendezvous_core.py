"""The arrival rendezvous' decisions (``core.py``), alone and driven through many
interleavings: random arrivals, join timeouts, deaths, freezes and thaws, workers slow to stop and
clock offsets of up to ten minutes either way, for 2 to 16 nodes with and without spares, each node
the real ``ArrivalRendezvous`` over one store on a simulated clock (``rendezvous_sim.py``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.rendezvous_sim import EXPIRY_S, KEEP_ALIVE_S, LAST_CALL_S, Fault, SimNode, Simulation
from torchx_ext.launcher.rendezvous.core import (NodeDescription, RankClaim, Seen, Settings, Sightings, TurnView,
                                                 assign_ranks, my_turn, ranks_of, waiters_ahead)

SETTLE_S = 60.0
"""After the last fault: expiry, last call, turns, workers stopping, with room to spare."""


@dataclass
class Scenario:
    min_nodes: int
    max_nodes: int
    nodes: list[SimNode]
    faults: list[Fault]
    seed: int

    @property
    def fixed(self) -> bool:
        return self.min_nodes == self.max_nodes

    @property
    def end(self) -> float:
        return max([10.0] + [fault.at + fault.lasts for fault in self.faults]) + SETTLE_S


@st.composite
def scenarios(draw: st.DrawFn, faults: bool = True, offsets: float = 600.0) -> Scenario:
    max_nodes = draw(st.integers(2, 16))
    fixed = draw(st.booleans())
    min_nodes = max_nodes if fixed else draw(st.integers(1, max_nodes))
    spares = draw(st.integers(0, 2)) if fixed else 0
    nodes = []
    for index in range(max_nodes + spares):
        spare = index >= max_nodes
        quitter = not fixed and draw(st.integers(0, 5)) == 0  # joins early and gives up: it withdraws
        nodes.append(SimNode(
            name=f"node{index}", node_rank=index if fixed else -1,
            start_at=draw(st.floats(5, 8)) if spare else draw(st.floats(0, 3 if fixed else 10)),
            # Workers slow to stop: in an elastic round, within the last call (else, as with torch's
            # handler, the slowest member misses each round and asks for the next, for ever).
            offset=draw(st.floats(-offsets, offsets)), stop_delay=draw(st.floats(0, 3 if fixed else 1.5)),
            join_timeout_s=draw(st.floats(1, 3)) if quitter else 600.0))
    drawn: list[Fault] = []
    if faults:
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["kill", "freeze"]))
            drawn.append(Fault(at=draw(st.floats(4, 40)), kind=kind, victim=draw(st.integers(0, len(nodes) - 1)),
                               lasts=draw(st.floats(1, 25)) if kind == "freeze" else 0.0))
    return Scenario(min_nodes, max_nodes, nodes, drawn, draw(st.integers(0, 2**32)))


def simulate(scenario: Scenario) -> Simulation:
    simulation = Simulation(scenario.nodes, scenario.min_nodes, scenario.max_nodes, scenario.faults, scenario.seed)
    simulation.run(scenario.end)
    return simulation


PROPERTIES = settings(max_examples=int(os.environ.get("TORCHX_EXT_RENDEZVOUS_EXAMPLES", "60")), deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])
"""60 interleavings a property in the suite (about 20 s each); more by hand, e.g. 1000."""


@PROPERTIES
@given(scenarios())
def test_every_round_holds_live_nodes_with_ranks_0_to_n_minus_1_and_seals_no_sooner_than_torchs(scenario: Scenario) -> None:
    simulation = simulate(scenario)

    for seal in simulation.seals:
        assert len(set(seal.arrivals)) == len(seal.arrivals), seal
        assert scenario.min_nodes <= len(seal.arrivals) <= scenario.max_nodes, seal
        assert not seal.withdrawn, seal
        # No node dead or frozen for longer than the keep-alive expiry is in a round.
        assert seal.gone_for <= EXPIRY_S + 1e-6, seal
        ranks = sorted(owner.rounds[seal.round] for owner in seal.owners if seal.round in owner.rounds)
        assert len(set(ranks)) == len(ranks) and set(ranks) <= set(range(len(seal.arrivals))), (seal, ranks)
        if len(seal.arrivals) < scenario.max_nodes:
            # The last call ran from when min_nodes were present (arrived, not withdrawn).
            timeline = [entry for entry in simulation.present.get(seal.round, []) if entry[0] <= seal.at]
            reached = [at for (at, count), before in zip(timeline, [0] + [count for _, count in timeline])
                       if count >= scenario.min_nodes > before]
            assert reached and seal.at >= reached[-1] + LAST_CALL_S - 1e-6, (seal, timeline)
            # ... and from when the min-th of its members arrived: a participant that died before
            # counted toward min_nodes for a while, not for the last call.
            came = sorted(simulation.arrived_at[(seal.round, arrival)] for arrival in seal.arrivals)
            assert seal.at >= came[scenario.min_nodes - 1] + LAST_CALL_S - 1e-6, (seal, came)


@PROPERTIES
@given(scenarios())
def test_a_survivor_keeps_its_rank_and_every_live_node_ends_in_the_round_or_waits_as_a_spare(scenario: Scenario) -> None:
    simulation = simulate(scenario)

    by_round = {seal.round: seal for seal in simulation.seals}
    for node in scenario.nodes:
        for round_, rank in node.rounds.items():
            after = node.rounds.get(round_ + 1)
            if after is not None and round_ + 1 in by_round and rank < len(by_round[round_ + 1].arrivals):
                assert after == rank, (node.name, node.rounds)
    # The store holds the last two rounds: no node behind the job (thawed) wrote an old one's key anew.
    open_round = int(simulation.store.data.get("torchx_ext.rdzv/job/round", b"0"))
    rounds = {int(match.group(1)) for match in map(re.compile(r"torchx_ext\.rdzv/job/r(\d+)[./]").match,
                                                    simulation.store.data) if match}
    assert not [round_ for round_ in rounds if round_ < open_round - 1], (open_round, sorted(rounds))
    live = [node for node in scenario.nodes if node.live and node.frozen_until is None]
    assert simulation.seals or len(live) < scenario.min_nodes
    if len(live) < scenario.min_nodes or not simulation.seals:
        return
    latest = max(simulation.seals, key=lambda seal: seal.round)
    members = [node for node in live if node.state == "member" and node.round == latest.round]
    assert all(owner in live for owner in latest.owners), [owner.name for owner in latest.owners]
    assert len(members) == min(len(live), scenario.max_nodes), (
        latest, [(node.name, node.state, node.round) for node in live])


@PROPERTIES
@given(scenarios(faults=False))
def test_with_no_fault_nobody_restarts_anybody_whatever_the_clocks(scenario: Scenario) -> None:
    if not scenario.fixed or any(node.join_timeout_s < 600 for node in scenario.nodes):
        return  # an elastic round takes a later node in by a restart, as torch's does
    simulation = simulate(scenario)

    assert simulation.restarts_asked == 0
    assert [seal.round for seal in simulation.seals] == [0]
    members = [node for node in scenario.nodes if node.state == "member"]
    assert sorted(node.rank for node in members if node.rank is not None) == list(range(scenario.max_nodes))
    assert len(members) == scenario.max_nodes


def test_a_participant_dead_before_the_seal_costs_the_watchers_reads_not_every_node() -> None:
    # 32 nodes arrive over 8 s, min 31 and max 32; one dies early: the round is full at 7.75 s, but
    # not of live nodes, so it waits for the last call (10 s), which runs from the 31st live arrival.
    nodes = [SimNode(name=f"node{index}", node_rank=-1, start_at=index / 4, offset=index * 7.0, stop_delay=0.5,
                     join_timeout_s=600.0) for index in range(32)]
    simulation = Simulation(nodes, 31, 32, [Fault(at=2.0, kind="kill", victim=5)], seed=3, last_call_s=10)
    simulation.run(40)

    assert [len(seal.arrivals) for seal in simulation.seals] == [31]
    assert 7.75 + 10 <= simulation.seals[0].at < 7.75 + 10 + 2 * KEEP_ALIVE_S
    later = {name: reads for name, reads in simulation.node_keys_read.items() if int(name[4:]) >= 3}
    # each read the round once, perhaps twice, and the three watchers before it now and then: not
    # the round every half beat (before: up to 96 times)
    assert max(later.values()) <= 3 * 32, later


def test_ten_minutes_ahead_and_ten_behind_decide_as_clocks_that_agree() -> None:
    def run(offsets: list[float]) -> list[tuple[int | None, int | None]]:
        nodes = [SimNode(name=f"node{index}", node_rank=index, start_at=index * 0.4, offset=offset, stop_delay=1.0,
                         join_timeout_s=600.0) for index, offset in enumerate(offsets)]
        simulation = Simulation(nodes, 3, 3, [Fault(at=20, kind="kill", victim=1)], seed=7)
        simulation.run(80)
        return [(node.round, node.rank) for node in nodes]

    agreed = run([0.0, 0.0, 0.0, 0.0])
    assert run([600.0, -600.0, 0.0, 37.5]) == agreed
    assert agreed == [(1, 0), (0, 1), (1, 2), (1, 1)]  # killed in round 0; the spare took its rank 1


# --- the decisions alone -----------------------------------------------------------------------


def test_a_key_is_alive_when_seen_to_move_silent_when_still_for_the_expiry_and_unknown_at_a_first_look() -> None:
    seen = Sightings(expiry_s=3)

    assert seen.look("k", b"0 x", now=100) is Seen.UNKNOWN  # a first look: written when?
    assert seen.look("k", b"1 x", now=101) is Seen.ALIVE  # it moved since the last look
    assert seen.look("k", b"1 x", now=102.9) is Seen.ALIVE
    assert seen.look("k", b"1 x", now=103.5) is Seen.UNKNOWN  # written after 100: maybe 3.5 s ago
    assert seen.look("k", b"1 x", now=104.1) is Seen.SILENT  # the same for 3.1 s
    seen.saw_arrivals(0, 2, now=50)
    assert seen.look("r0.node.3", b"0 x", now=52, written_after=seen.written_after(0, 3)) is Seen.ALIVE  # came after 50
    assert seen.look("w", b"0 x", now=0, written_after=None) is Seen.UNKNOWN
    assert seen.look("w", b"9 x", now=10) is Seen.UNKNOWN  # moved, but the last look was 10 s ago
    assert seen.look("gone", b"-", now=0) is Seen.WITHDRAWN and seen.look("x", None, now=0) is Seen.ABSENT


def test_survivors_keep_their_ranks_and_a_spare_takes_the_lost_ones() -> None:
    # Node 1 of 3 lost; the spare (node rank 3) comes: survivors 0 and 2 keep 0 and 2.
    claims = [RankClaim(0, 0, ()), RankClaim(2, 2, ()), RankClaim(None, 3, ())]
    assert assign_ranks(claims) == [0, 2, 1]
    # A round of 2 after node 1 of 3 was lost: node 2's rank is past the end, it takes 1.
    assert assign_ranks([RankClaim(0, 0, ()), RankClaim(2, 2, ())]) == [0, 1]
    # A first round: by --node-rank when distinct, else torch's order.
    assert assign_ranks([RankClaim(None, 3, ()), RankClaim(None, 1, ())]) == [1, 0]
    assert ranks_of([NodeDescription("b", 1, -1, "t0"), NodeDescription("a", 2, -1, "t1")]) == [1, 0]
    # Two launchers with the same host name and pid (host-network containers, pid 1) still differ.
    assert sorted(ranks_of([NodeDescription("h", 1, -1, "x"), NodeDescription("h", 1, -1, "y")])) == [0, 1]
    # A description the version before wrote (no rank) is read; one that is none is not seated.
    assert NodeDescription.parse('["h", 1, 0, "t", 2]') == NodeDescription("h", 1, 0, "t", 2, -1)
    assert NodeDescription.parse("garbage") is None and NodeDescription.parse("[1]") is None


def test_a_waiter_lets_a_member_still_beating_come_first_up_to_the_expiry_and_the_grace() -> None:
    rules = Settings(min_nodes=2, max_nodes=2, last_call_s=30, keep_alive_s=2, expiry_s=6, turn_grace_s=2)
    slow = TurnView(now=105, started=100, arrived=1, ahead=0, members=[Seen.LEFT, Seen.ALIVE], clear_since=None)
    assert not my_turn(slow, rules)  # 5 s on: the member's key still moves
    assert my_turn(TurnView(now=108.1, started=100, arrived=1, ahead=0, members=[Seen.LEFT, Seen.ALIVE],
                            clear_since=None), rules)  # expiry + grace: it goes anyway
    dead = TurnView(now=103, started=100, arrived=1, ahead=0, members=[Seen.LEFT, Seen.SILENT], clear_since=101)
    assert my_turn(dead, rules)  # the one member that came is there, the other is silent
    behind = TurnView(now=102, started=100, arrived=1, ahead=1, members=[Seen.LEFT, Seen.SILENT], clear_since=101)
    assert not my_turn(behind, rules)  # a waiter ahead of it goes first
    assert KEEP_ALIVE_S < EXPIRY_S


def test_waiters_go_in_the_order_they_came_not_the_order_they_took_this_rounds_tickets() -> None:
    # Two spares a round left out take the next round's tickets in flipped order: the one that came
    # first (came 1) holds ticket 2. It goes first; the other lets it.
    assert waiters_ahead(came=1, ticket=2, places=[2, 1]) == 0
    assert waiters_ahead(came=2, ticket=1, places=[2, 1]) == 1
    assert waiters_ahead(came=3, ticket=3, places=[1, 2, 3]) == 2  # a newcomer: after both
    assert waiters_ahead(came=2, ticket=1, places=[2, None]) == 1  # a ticket whose place is not written yet goes before


def test_when_the_first_arrivals_die_before_the_seal_the_next_ones_watch_and_seal() -> None:
    # 12 nodes over 3 s, min 6 and max 12; the three that came first (the watchers) die at 1 s.
    nodes = [SimNode(name=f"node{index}", node_rank=-1, start_at=index / 4, offset=-index * 60.0, stop_delay=0.5,
                     join_timeout_s=600.0) for index in range(12)]
    simulation = Simulation(nodes, 6, 12, [Fault(at=1.0, kind="kill", victim=victim) for victim in range(3)], seed=5)
    simulation.run(40)

    assert [sorted(owner.name for owner in seal.owners) for seal in simulation.seals] == [
        sorted(f"node{index}" for index in range(3, 12))]
    # The next three watch once the last call has been over for an expiry and a beat; they can tell
    # a silent key from a live one an expiry after their first look.
    assert simulation.seals[0].at < 1.25 + LAST_CALL_S + EXPIRY_S + KEEP_ALIVE_S + EXPIRY_S + 2


def test_a_fixed_round_short_of_a_dead_node_costs_the_others_two_reads_not_one_every_half_beat() -> None:
    # min = max = 32, one dies before the last comes: the round can never seal (fewer than min
    # live), and every last call starts again; only the watchers keep reading the round.
    nodes = [SimNode(name=f"node{index}", node_rank=index, start_at=index / 4, offset=0.0, stop_delay=0.5,
                     join_timeout_s=600.0) for index in range(32)]
    simulation = Simulation(nodes, 32, 32, [Fault(at=2.0, kind="kill", victim=5)], seed=11)
    simulation.run(60)

    assert simulation.seals == []
    later = {name: reads for name, reads in simulation.node_keys_read.items() if int(name[4:]) >= 3}
    # The round twice (32 keys a read), and the three watchers before it at each beat (60 s of 1 s
    # beats): O(1) a beat, where it read the round every half beat before (3,072).
    assert max(later.values()) <= 2 * 32 + 3 * 60 / KEEP_ALIVE_S, later
