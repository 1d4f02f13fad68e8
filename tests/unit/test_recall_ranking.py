"""Recall ranking and link expansion (tht.memory.recall), with in-memory callbacks.

Scores are checked against hand-computed values: a direct hit at rank r scores
1/(60+r); a path of h hops from the seed at rank r contributes 0.5**h/(60+r).
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tht.errors import InvalidInput
from tht.memory.recall import (
    MAX_CARD_LOOKUPS,
    MAX_INSPECTED_LINKS,
    RankedCard,
    rank_recall,
    seed_count,
    validate_top,
)


class Graph:
    """Outgoing links and eligibility in dicts; records every callback call."""

    def __init__(
        self,
        edges: list[tuple[str, str]],
        ineligible: frozenset[str] = frozenset(),
        eligible: set[str] | None = None,
    ):
        self.links: dict[str, list[tuple[str, str]]] = {}
        for source, target in edges:
            self.links.setdefault(source, []).append((target, f"{source}>{target}"))
        cards = {card for edge in edges for card in edge}
        self.eligible_cards = (cards if eligible is None else eligible) - ineligible
        self.links_calls: list[list[str]] = []
        self.eligible_calls: list[list[str]] = []

    def links_of(self, card_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
        self.links_calls.append(list(card_ids))
        return {card_id: self.links[card_id] for card_id in card_ids if card_id in self.links}

    def eligible(self, card_ids: list[str]) -> set[str]:
        self.eligible_calls.append(list(card_ids))
        return {card_id for card_id in card_ids if card_id in self.eligible_cards}

    def rank(self, seeds: list[str], top: int = 100):
        return rank_recall(seeds, top=top, links_of=self.links_of, eligible=self.eligible)

    def looked_up(self) -> list[str]:
        return [card_id for call in self.eligible_calls for card_id in call]


def edges(spec: str) -> list[tuple[str, str]]:
    """'a>b b>c' -> [('a', 'b'), ('b', 'c')]"""
    return [tuple(pair.split(">")) for pair in spec.split()]  # type: ignore[misc]


def ids(ranking) -> list[str]:
    return [card.card_id for card in ranking.cards]


def by_id(ranking) -> dict[str, RankedCard]:
    return {card.card_id: card for card in ranking.cards}


# --- exact scores and order -------------------------------------------------------


def test_fixed_graph_exact_scores_paths_and_order():
    graph = Graph(edges("s1>x s2>x x>z s3>z s1>s3 s3>w x>y y>far"))
    ranking = graph.rank(["s1", "s2", "s3"])

    expected = [
        # card, score, path, seed rank, hops, meanings
        ("s3", 1 / 63 + 0.5 / 61, ("s1", "s3"), 3, 1, ("s1>s3",)),
        ("s1", 1 / 61, ("s1",), 1, 0, ()),
        ("s2", 1 / 62, ("s2",), 2, 0, ()),
        ("x", 0.5 / 61, ("s1", "x"), None, 1, ("s1>x",)),
        # w and z tie at 0.5/63 (the two-hop paths through s1 are weaker): id order.
        ("w", 0.5 / 63, ("s3", "w"), None, 1, ("s3>w",)),
        ("z", 0.5 / 63, ("s3", "z"), None, 1, ("s3>z",)),
        ("y", 0.25 / 61, ("s1", "x", "y"), None, 2, ("s1>x", "x>y")),
    ]
    assert [(c.card_id, c.path, c.seed_rank, c.hops, c.meanings) for c in ranking.cards] == [
        (card, path, rank, hops, meanings) for card, _, path, rank, hops, meanings in expected
    ]
    assert [c.score for c in ranking.cards] == pytest.approx(
        [score for _, score, *_ in expected], rel=1e-12
    )
    assert "far" not in ids(ranking)  # third hop
    assert ranking.stopped_by is None


def test_two_seeds_linking_each_other_add_the_other_seeds_contribution():
    ranking = Graph(edges("a>b b>a")).rank(["a", "b"])
    a, b = ranking.cards
    assert (a.card_id, b.card_id) == ("a", "b")
    assert a.score == pytest.approx(1 / 61 + 0.5 * (1 / 62))
    assert b.score == pytest.approx(1 / 62 + 0.5 * (1 / 61))
    assert (a.path, a.seed_rank, a.hops, a.meanings) == (("b", "a"), 1, 1, ("b>a",))
    assert (b.path, b.seed_rank, b.hops) == (("a", "b"), 2, 1)


def test_direct_only_result_has_the_card_as_path_and_no_hops():
    (card,) = Graph([]).rank(["only"]).cards
    assert card == RankedCard("only", 1 / 61, ("only",), 1, 0, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        card.score = 1.0  # type: ignore[misc]


def test_ties_are_broken_by_card_id_and_top_truncates():
    graph = Graph(edges("s>c s>a s>b"))
    assert ids(graph.rank(["s"])) == ["s", "a", "b", "c"]
    assert ids(Graph(edges("s>c s>a s>b")).rank(["s"], top=2)) == ["s", "a"]


def test_strongest_path_wins_and_repeated_paths_do_not_add_up():
    graph = Graph(edges("s1>x s2>x s3>x s1>m m>x s2>n n>x"))
    x = by_id(graph.rank(["s1", "s2", "s3"]))["x"]
    assert x.score == 0.5 / 61  # not 0.5/61 + 0.5/62 + 0.5/63 + ...
    assert (x.path, x.hops, x.seed_rank) == (("s1", "x"), 1, None)


def test_equally_strong_paths_prefer_fewer_hops():
    seeds = [f"s{rank:03d}" for rank in range(1, 63)]
    # Two hops from rank 1 (0.25/61) is exactly as strong as one hop from rank 62 (0.5/122).
    graph = Graph([("s001", "m"), ("m", "x"), ("s062", "x")])
    x = by_id(graph.rank(seeds))["x"]
    assert 0.25 * (1 / 61) == 0.5 * (1 / 122)
    assert (x.path, x.hops) == (("s062", "x"), 1)


# --- traversal rules -----------------------------------------------------------------


def test_a_third_hop_is_never_reached():
    graph = Graph(edges("s>a a>b b>c"))
    ranking = graph.rank(["s"])
    assert ids(ranking) == ["s", "a", "b"]
    assert by_id(ranking)["b"].hops == 2
    assert "b" not in [card for call in graph.links_calls for card in call]
    assert "c" not in graph.looked_up()


def test_an_ineligible_intermediate_card_is_not_a_bridge():
    graph = Graph(edges("s>gone gone>b"), ineligible={"gone"})
    ranking = graph.rank(["s"])
    assert ids(ranking) == ["s"]
    assert graph.links_calls == [["s"]]  # the ineligible card's links are never read
    assert graph.looked_up() == ["gone"]


def test_an_ineligible_destination_is_dropped():
    graph = Graph(edges("s>pending s>ok a>pending"), ineligible={"pending"})
    assert ids(graph.rank(["s", "a"])) == ["s", "a", "ok"]


def test_an_ineligible_bridge_does_not_hide_another_route():
    graph = Graph(edges("s>gone gone>b s>ok ok>b"), ineligible={"gone"})
    b = by_id(graph.rank(["s"]))["b"]
    assert (b.path, b.score) == (("s", "ok", "b"), 0.25 / 61)


def test_a_cycle_back_to_its_own_seed_adds_nothing():
    ranking = Graph(edges("a>b b>a b>c c>a")).rank(["a"])
    assert [(c.card_id, c.score, c.path) for c in ranking.cards] == [
        ("a", 1 / 61, ("a",)),
        ("b", 0.5 / 61, ("a", "b")),
        ("c", 0.25 / 61, ("a", "b", "c")),
    ]


def test_a_cycle_between_linked_cards_is_self_consistent():
    # s -> a <-> b: each is reached once, by its strongest path, and nothing loops.
    graph = Graph(edges("s>a a>b b>a"))
    ranking = graph.rank(["s"])
    assert [(c.card_id, c.path) for c in ranking.cards] == [
        ("s", ("s",)),
        ("a", ("s", "a")),
        ("b", ("s", "a", "b")),
    ]
    assert graph.links_calls == [["s"], ["a"]] and graph.eligible_calls == [["a"], ["b"]]


def test_a_self_link_and_a_duplicate_link_are_harmless():
    graph = Graph([])
    graph.links = {"s": [("s", "self"), ("x", "zeta"), ("x", "alpha")]}
    graph.eligible_cards = {"x"}
    ranking = graph.rank(["s"])
    assert [(c.card_id, c.score, c.meanings) for c in ranking.cards] == [
        ("s", 1 / 61, ()),
        ("x", 0.5 / 61, ("alpha",)),
    ]


def test_only_the_twenty_smallest_target_ids_are_considered():
    targets = [f"t{i:02d}" for i in range(25)]
    shuffled = targets[:]
    random.Random(7).shuffle(shuffled)
    graph = Graph([("s", target) for target in shuffled])
    ranking = graph.rank(["s"])
    assert graph.eligible_calls == [targets[:20]]
    assert ids(ranking) == ["s", *targets[:20]]
    assert ranking.inspected_links == 20


# --- budgets -------------------------------------------------------------------------


def test_lookup_budget_stops_during_hop_one():
    seeds = [f"s{i:02d}" for i in range(10)]
    graph = Graph([(seed, f"{seed}-t{j:02d}") for seed in seeds for j in range(20)])
    ranking = graph.rank(seeds)
    # 10 seeds + 190 looked-up cards = 200: the 191st new target (s09-t10) stops expansion.
    expected = [f"{seed}-t{j:02d}" for seed in seeds[:9] for j in range(20)]
    expected += [f"s09-t{j:02d}" for j in range(10)]
    assert graph.eligible_calls == [expected]
    assert graph.links_calls == [seeds]  # no hop two after a stop
    assert (ranking.stopped_by, ranking.card_lookups, ranking.inspected_links) == (
        "card_lookups",
        200,
        190,
    )
    assert len(ranking.cards) == 100


def test_lookup_budget_stops_during_hop_two():
    bridges = [f"b{i:02d}" for i in range(20)]
    graph = Graph(
        [("s", b) for b in bridges] + [(b, f"{b}-c{j:02d}") for b in bridges for j in range(20)]
    )
    ranking = graph.rank(["s"])
    # 1 seed + 20 bridges leave 179 lookups: b00..b07 (160 targets) and 19 of b08's.
    expected = [f"{b}-c{j:02d}" for b in bridges[:8] for j in range(20)]
    expected += [f"b08-c{j:02d}" for j in range(19)]
    assert graph.eligible_calls == [bridges, expected]
    assert graph.links_calls == [["s"], bridges]
    assert (ranking.stopped_by, ranking.card_lookups, ranking.inspected_links) == (
        "card_lookups",
        200,
        199,
    )
    assert by_id(ranking)["b00-c00"].path == ("s", "b00", "b00-c00")


def test_link_budget_stops_during_hop_one():
    seeds = [f"s{i:02d}" for i in range(21)]
    shared = [f"t{j:02d}" for j in range(20)]
    graph = Graph(
        [(seed, target) for seed in seeds[:20] for target in shared]
        + [("s20", f"u{j:02d}") for j in range(20)]
    )
    ranking = graph.rank(seeds)
    # 20 seeds x 20 links = 400: the 21st seed's first link would be the 401st.
    assert graph.eligible_calls == [shared]
    assert graph.links_calls == [seeds]
    assert (ranking.stopped_by, ranking.inspected_links, ranking.card_lookups) == (
        "inspected_links",
        400,
        41,
    )
    assert not any(card.startswith("u") for card in ids(ranking))
    assert by_id(ranking)["t00"].path == ("s00", "t00")


def test_link_budget_stops_during_hop_two():
    bridges = [f"b{i:02d}" for i in range(20)]
    shared = [f"c{j:02d}" for j in range(20)]
    graph = Graph(
        [("s", b) for b in bridges]
        + [(b, c) for b in bridges[:19] for c in shared]
        + [("b19", f"d{j:02d}") for j in range(20)]
    )
    ranking = graph.rank(["s"])
    # 20 links at hop one + 19 x 20 at hop two = 400: b19's first link would be the 401st.
    assert graph.eligible_calls == [bridges, shared]
    assert (ranking.stopped_by, ranking.inspected_links, ranking.card_lookups) == (
        "inspected_links",
        400,
        41,
    )
    assert not any(card.startswith("d") for card in ids(ranking))
    assert by_id(ranking)["c05"].path == ("s", "b00", "c05")


def test_budgets_are_never_exceeded_on_a_large_graph():
    cards = [f"c{i:04d}" for i in range(2000)]
    rng = random.Random(3)
    graph = Graph([(card, rng.choice(cards)) for card in cards for _ in range(30)])
    seeds = cards[:100]
    ranking = graph.rank(seeds)
    looked_up = graph.looked_up()
    assert len(looked_up) == len(set(looked_up)) <= MAX_CARD_LOOKUPS - len(seeds)
    assert not set(looked_up) & set(seeds)
    asked_links = [card for call in graph.links_calls for card in call]
    assert len(asked_links) == len(set(asked_links)) <= MAX_CARD_LOOKUPS
    assert (
        ranking.card_lookups <= MAX_CARD_LOOKUPS and ranking.inspected_links <= MAX_INSPECTED_LINKS
    )
    assert ranking.stopped_by is not None


def test_a_seeds_links_are_inspected_once_even_when_it_bridges():
    graph = Graph(edges("a>b b>c"))
    ranking = graph.rank(["a", "b"])
    assert graph.links_calls == [["a", "b"], ["c"]]  # b's links are reused at hop two
    assert graph.eligible_calls == [["c"]]
    assert ranking.inspected_links == 2
    c = by_id(ranking)["c"]
    assert (c.path, c.score) == (("b", "c"), 0.5 / 62)  # stronger than a>b>c (0.25/61)


def test_a_seed_reached_from_another_seed_is_a_bridge():
    seeds = [f"s{rank:03d}" for rank in range(1, 81)]
    # One hop from rank 80 (0.5/140) is weaker than two hops from rank 1 through it (0.25/61).
    graph = Graph([("s001", "s080"), ("s080", "x")])
    x = by_id(graph.rank(seeds))["x"]
    assert (x.path, x.score) == (("s001", "s080", "x"), 0.25 / 61)


# --- batching ------------------------------------------------------------------------


def test_callbacks_are_called_once_per_hop_not_per_card():
    seeds = [f"s{i}" for i in range(5)]
    first = [(seed, f"{seed}-a{j}") for seed in seeds for j in range(5)]
    second = [(target, f"{target}-b{k}") for _, target in first for k in range(3)]
    graph = Graph(first + second)
    ranking = graph.rank(seeds)
    assert len(graph.links_calls) == 2 and len(graph.eligible_calls) == 2
    assert graph.links_calls[0] == seeds and sorted(graph.links_calls[1]) == sorted(
        t for _, t in first
    )
    assert len(graph.eligible_calls[0]) == 25 and len(graph.eligible_calls[1]) == 75
    assert ranking.stopped_by is None


def test_without_seeds_nothing_is_asked():
    graph = Graph(edges("a>b"))
    ranking = graph.rank([])
    assert ranking.cards == () and graph.links_calls == [] and graph.eligible_calls == []


def test_a_card_missing_from_the_links_answer_has_no_links():
    ranking = Graph(edges("other>x")).rank(["s"])
    assert ids(ranking) == ["s"]


# --- seed count and validation ------------------------------------------------------


@pytest.mark.parametrize(("top", "seeds"), [(1, 20), (7, 21), (34, 100), (100, 100)])
def test_seed_count(top, seeds):
    assert seed_count(top) == seeds


@pytest.mark.parametrize("top", [0, -1, 101, True, 2.5, "3", None])
def test_top_outside_one_to_hundred_is_invalid_input(top):
    with pytest.raises(InvalidInput):
        seed_count(top)
    with pytest.raises(InvalidInput):
        validate_top(top)
    with pytest.raises(InvalidInput):
        Graph([]).rank(["s"], top=top)


def test_seeds_must_be_distinct_and_at_most_one_hundred():
    with pytest.raises(ValueError):
        Graph([]).rank(["a", "a"])
    with pytest.raises(ValueError):
        Graph([]).rank([f"s{i}" for i in range(101)])


# --- property ------------------------------------------------------------------------

CARDS = [f"c{i:02d}" for i in range(25)]


@settings(max_examples=300, deadline=None)
@given(
    links=st.lists(st.tuples(st.sampled_from(CARDS), st.sampled_from(CARDS)), max_size=120),
    eligible=st.sets(st.sampled_from(CARDS)),
    seeds=st.lists(st.sampled_from(CARDS), unique=True, max_size=12),
    top=st.integers(min_value=1, max_value=100),
)
def test_results_are_ranked_unique_bounded_and_eligible(links, eligible, seeds, top):
    graph = Graph(links, eligible=eligible)
    ranking = graph.rank(seeds, top=top)
    cards = ranking.cards
    ranks = {seed: rank for rank, seed in enumerate(seeds, start=1)}
    assert list(cards) == sorted(cards, key=lambda c: (-c.score, c.card_id))
    assert len({c.card_id for c in cards}) == len(cards) <= top
    for card in cards:
        assert card.card_id in ranks or card.card_id in eligible
        assert card.seed_rank == ranks.get(card.card_id)
        # The path is a simple chain of real links from a seed, and explains the score.
        assert card.path[-1] == card.card_id and len(set(card.path)) == len(card.path)
        assert card.hops == len(card.path) - 1 == len(card.meanings) <= 2
        assert all((a, b) in set(links) for a, b in itertools.pairwise(card.path))
        direct = 1 / (60 + card.seed_rank) if card.seed_rank else 0.0
        linked = 0.5**card.hops / (60 + ranks[card.path[0]]) if card.hops else 0.0
        assert card.score == pytest.approx(direct + linked)
    looked_up = graph.looked_up()
    assert len(looked_up) == len(set(looked_up)) and not set(looked_up) & set(seeds)
    assert len(graph.links_calls) <= 2 and len(graph.eligible_calls) <= 2
