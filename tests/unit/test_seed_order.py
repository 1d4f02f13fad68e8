"""Seed order: RRF (k = 60) of dense rank, BM25 rank and coverage rank (tht.memory.recall).

Values are computed by hand from the formulas: coverage = sum of the IDF of the card's
terms the question holds / sum of the IDF of all its terms, IDF over the candidates
(ln(1 + (n - df + 0.5) / (df + 0.5))).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tht.memory.recall import (
    RecallTuning,
    SeedSignals,
    coverage_shares,
    feedback_ranks,
    feedback_terms,
    lift_named_titles,
    named_title_weights,
    number_words_as_digits,
    order_seeds,
    title_name,
)


def seed(card_id, dense, bm25, *terms):
    return SeedSignals(card_id, dense, bm25, frozenset(terms))


def idf(n, df):
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def test_coverage_weights_terms_by_their_idf_among_the_candidates():
    candidates = [seed("a", 1, 1, 1, 2), seed("b", 2, 2, 1, 3, 4), seed("c", 3, None)]
    shares = coverage_shares([1, 3], candidates)
    assert shares["a"] == pytest.approx(idf(3, 2) / (idf(3, 2) + idf(3, 1)))
    assert shares["b"] == pytest.approx((idf(3, 2) + idf(3, 1)) / (idf(3, 2) + 2 * idf(3, 1)))
    assert shares["c"] == 0  # a card without terms covers nothing


def test_a_card_the_question_covers_whole_overtakes_one_sharing_a_clause():
    # "x" leads plain RRF of the branches (1/61 + 1/63 > 2/62), but most of its text
    # is about something else; "y" is entirely about the question.
    x = seed("x", 1, 3, 10, 11, 12, 13, 14)
    y = seed("y", 2, 2, 10, 11)
    z = seed("z", 3, 1, 20)
    assert 1 / 61 + 1 / 63 > 2 / 62
    # x: 1/61 + 1/63 + 1/62 (coverage 2nd) < y: 2/62 + 1/61 (coverage 1st); z covers nothing
    assert order_seeds([10, 11, 30], [x, y, z]) == ["y", "x", "z"]


def test_without_coverage_differences_the_order_is_plain_rrf_of_the_branches():
    # equal coverage everywhere: the coverage ranks follow card ids, and ranks far
    # apart in the branches still decide
    candidates = [seed("b", 1, 5, 7), seed("a", 9, 8, 7), seed("c", 2, 2, 7)]
    assert order_seeds([7], candidates) == ["c", "b", "a"]


def test_a_branch_that_missed_a_card_gives_it_nothing():
    only_dense = seed("d", 1, None, 5)
    both = seed("e", 3, 3, 5)
    # d: 1/61 + 1/61 (coverage tie broken by id); e: 1/63 + 1/63 + 1/62
    assert order_seeds([5], [only_dense, both]) == ["e", "d"]


def test_equal_scores_are_ordered_by_card_id():
    assert order_seeds([], [seed("b", None, None), seed("a", None, None)]) == ["a", "b"]


def test_distinct_candidates_are_required():
    with pytest.raises(ValueError):
        order_seeds([1], [seed("a", 1, 1, 1), seed("a", 2, 2, 1)])


@given(
    st.lists(
        st.tuples(
            st.integers(1, 30), st.integers(1, 30), st.frozensets(st.integers(0, 8), max_size=5)
        ),
        min_size=1,
        max_size=12,
    ),
    st.frozensets(st.integers(0, 8)),
)
def test_the_order_is_a_permutation_and_does_not_depend_on_input_order(rows, question):
    candidates = [SeedSignals(f"c{i:02d}", d, b, terms) for i, (d, b, terms) in enumerate(rows)]
    ordered = order_seeds(question, candidates)
    assert sorted(ordered) == sorted(c.card_id for c in candidates)
    assert order_seeds(question, list(reversed(candidates))) == ordered
    assert all(0 <= share <= 1 for share in coverage_shares(question, candidates).values())


def test_a_bm25_weight_of_zero_orders_by_the_dense_rank_alone():
    # a question in another language than the workspace's (RecallTuning)
    candidates = [
        SeedSignals("mem-a", dense_rank=3, bm25_rank=1, terms=frozenset({1})),
        SeedSignals("mem-b", dense_rank=1, bm25_rank=None, terms=frozenset({2})),
        SeedSignals("mem-c", dense_rank=2, bm25_rank=2, terms=frozenset({1, 2})),
        SeedSignals("mem-d", dense_rank=None, bm25_rank=3, terms=frozenset({3})),
    ]
    assert order_seeds([1], candidates, coverage=False, bm25_weight=0.0) == [
        "mem-b",
        "mem-c",
        "mem-a",
        "mem-d",
    ]
    # the spec's weights: BM25's first rank lifts mem-a above mem-b
    assert order_seeds([1], candidates, coverage=False)[0] == "mem-a"


# --- feedback from the dense neighbours (on across languages only) -------------------


def test_feedback_terms_are_those_of_the_first_dense_neighbours():
    candidates = [
        seed("a", 2, 1, 1, 2),
        seed("b", 1, None, 3),
        seed("c", None, 2, 4),
        seed("d", 3, 3, 5),
    ]
    assert feedback_terms(candidates, 1) == {3}
    assert feedback_terms(candidates, 2) == {1, 2, 3}
    assert feedback_terms(candidates, 10) == {1, 2, 3, 5}  # c: not a dense hit
    assert feedback_terms(candidates, 0) == frozenset()


def test_feedback_ranks_follow_the_expanded_coverage_then_the_dense_rank():
    # the neighbour "n" lends its terms 1, 2, 3: "b" and "a" cover that whole, like "n";
    # equal coverage follows the dense rank (not the card id); "z" has no dense rank
    n = seed("n", 1, None, 1, 2, 3)
    a = seed("a", 5, None, 1, 2)
    b = seed("b", 2, None, 3)
    half = seed("h", 3, None, 1, 9)
    z = seed("z", None, 1, 9)
    assert feedback_ranks([50], [a, b, half, n, z], 1) == {"n": 1, "b": 2, "a": 3, "h": 4, "z": 5}
    # the question's own terms count too: with 9, "h" and "z" are whole as well, and
    # a card without dense rank comes after every dense hit of equal coverage
    ranks = feedback_ranks([9], [a, b, half, n, z], 1)
    assert ranks == {"n": 1, "b": 2, "h": 3, "a": 4, "z": 5}


def test_feedback_lifts_a_card_sharing_the_dense_neighbours_words():
    # a question in another language shares no term with the cards (coverage off, BM25
    # weight 0): the dense neighbour "n" lends its terms 1 and 2, which "g" holds whole.
    n = seed("n", 1, None, 1, 2, 3)
    x = seed("x", 2, None, 9)
    g = seed("g", 3, None, 1, 2)
    plain = order_seeds([50], [n, x, g], coverage=False, bm25_weight=0.0)
    assert plain == ["n", "x", "g"]
    # feedback ranks n 1, g 2, x 3; weight 1: n 2/61; x 1/62 + 1/63; g 1/63 + 1/62
    # (equal to x: card id, g first)
    lifted = order_seeds(
        [50], [n, x, g], coverage=False, bm25_weight=0.0, feedback=1, feedback_weight=1.0
    )
    assert lifted == ["n", "g", "x"]
    # weight 0.5 (the default): x 1/62 + 0.5/63 > g 1/63 + 0.5/62
    assert order_seeds([50], [n, x, g], coverage=False, bm25_weight=0.0, feedback=1) == plain
    g_closer = seed("g", 2, None, 1, 2)
    x_farther = seed("x", 3, None, 9)
    assert order_seeds(
        [50], [n, x_farther, g_closer], coverage=False, bm25_weight=0.0, feedback=1
    ) == ["n", "g", "x"]


def test_recall_tuning_defaults_feedback_across_languages_only_and_titles():
    tuning = RecallTuning()
    assert (tuning.feedback, tuning.feedback_across_languages) == (0, 3)
    assert (tuning.titles, tuning.title_weight) == (True, 0.25)
    spec = RecallTuning.spec_only()
    assert (spec.coverage, spec.language_aware, spec.feedback_across_languages) == (False, False, 0)
    assert spec.titles is False


def test_a_title_is_named_only_when_the_question_holds_all_its_terms():
    a, b, c, d = (
        seed("a", 1, 1, 1, 2, 9),
        seed("b", 2, 2, 1, 3),
        seed("c", 3, 3, 4),
        seed("d", 4, 4),
    )
    titles = {"a": frozenset({1, 2}), "b": frozenset({1, 3}), "c": frozenset(), "d": frozenset({7})}
    named = named_title_weights([1, 2, 7, 8], [a, b, c, d], titles)
    # b lacks term 3, c's title has no term (all stop words): neither is named; d's
    # title term is held by no candidate: the IDF of an unseen term
    assert named == pytest.approx({"a": idf(4, 2) + idf(4, 1), "d": idf(4, 0)})
    assert named_title_weights([1, 2], [a, b], {}) == {}  # a card without a known title


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("race no. refers to raceId", "race no."),
        ("Race number refer to raceId", "Race number"),
        ("full name = forename, surname", "full name"),
        (
            "Elementary School District refers to DOC = 52; Monthly average number of",
            "Elementary School District",
        ),
        ("legal age means age >= 18", "legal age"),
        ("ZIP stands for zip code", "ZIP"),
        ("Bond TYPE MEANS the kind of bond", "Bond TYPE"),
        # no marker, or nothing before it: the whole title
        ("Refund window", "Refund window"),
        ("= 52 for elementary school districts", "= 52 for elementary school districts"),
        # a marker is a whole word: "meaningful" and "referst" are none
        ("meaningful names", "meaningful names"),
        ("Cards referst to nothing", "Cards referst to nothing"),
    ],
)
def test_a_title_names_what_comes_before_its_definition(title, name):
    assert title_name(title) == name


def test_title_name_takes_the_first_of_the_given_markers_and_none_keeps_the_title():
    title = "Tiago Pasqualini is the DisplayName, which means a user"
    assert title_name(title) == "Tiago Pasqualini"
    assert title_name(title, (r"\bmeans\b",)) == "Tiago Pasqualini is the DisplayName, which"
    assert title_name(title, ()) == title
    assert RecallTuning().title_markers  # on by default
    assert not RecallTuning.spec_only().titles


@pytest.mark.parametrize(
    ("title", "name"),
    [
        ("Harlan and Jarrod Dixon are both the owners", "Harlan and Jarrod Dixon"),
        ("British is a nationality", "British"),
        ("most common bond type refers MAX(COUNT(bond_type))", "most common bond type"),
        ("Total enrollment can be represented by `Enrollment (K-12)`", "Total enrollment"),
        ("the time is represented by 'HH:MM:SS.mmm'", "the time"),
        ("A11 represents the average salary", "A11"),
        ("status 'C' indicates a closed loan", "status 'C'"),
        # words that contain a marker are none ("island", "thereafter", "Isabel")
        ("Isabel island thereafter", "Isabel island thereafter"),
    ],
)
def test_the_further_markers_of_definitions(title, name):
    assert title_name(title) == name


def test_named_titles_follow_the_first_seed_which_stays_first():
    order = ["top", "x", "y", "named", "z"]
    # named, 4th, 1st among the named: 1/64 + 0.25/61 > x's 1/62
    assert lift_named_titles(order, {"named": 1.0}, 0.25) == ["top", "named", "x", "y", "z"]
    # two named: the heavier title ranks first among them (z: 1/65 + 0.25/61), the
    # other second (named: 1/64 + 0.25/62); both pass x (1/62); the first seed stays
    # first although it is not named
    assert 1 / 64 + 0.25 / 62 > 1 / 65 + 0.25 / 61 > 1 / 62
    assert lift_named_titles(order, {"z": 5.0, "named": 1.0}, 0.25) == [
        "top",
        "named",
        "z",
        "x",
        "y",
    ]
    # weight 1: the heavier title's rank decides (1/65 + 1/61 > 1/64 + 1/62)
    assert lift_named_titles(order, {"z": 5.0, "named": 1.0}, 1.0) == [
        "top",
        "z",
        "named",
        "x",
        "y",
    ]
    # nothing named, weight 0, or a single seed: the order as it was
    assert lift_named_titles(order, {}, 0.25) == order
    assert lift_named_titles(order, {"named": 1.0}, 0.0) == order
    assert lift_named_titles(["only"], {"only": 1.0}, 0.25) == ["only"]


def test_order_seeds_lifts_a_named_title_only_when_titles_are_given():
    # "n" is last by both branches and covers little of its long text, but the
    # question names its title whole; "t" leads and stays first
    t = seed("t", 1, 1, 1, 2)
    x = seed("x", 2, 2, 1, 5)
    y = seed("y", 3, 3, 2, 6)
    n = seed("n", 4, 4, 3, 4, 7, 8, 9, 10, 11)
    question = [1, 2, 3, 4]
    plain = order_seeds(question, [t, x, y, n])
    assert plain == ["t", "x", "y", "n"]
    titles = {"t": frozenset({1}), "x": frozenset({5}), "y": frozenset({6}), "n": frozenset({3, 4})}
    assert order_seeds(question, [t, x, y, n], titles=titles) == ["t", "n", "x", "y"]
    # the weight is the caller's: 0 lifts nothing
    assert order_seeds(question, [t, x, y, n], titles=titles, title_weight=0.0) == plain


@pytest.mark.parametrize(
    ("text", "language", "expected"),
    [
        ("score of over nineteen", "en", "score of over nineteen 19"),
        (
            "the top three, Forty-Five and twenty one",
            "en",
            "the top three 3, Forty-Five 45 and twenty one 21",
        ),
        ("ninety", "en", "ninety 90"),
        # "one" is a pronoun more often than a number; words containing a number are none
        ("which one has seventeen", "en", "which one has seventeen 17"),
        ("often sevenfold tenth", "en", "often sevenfold tenth"),
        (
            "i tre migliori, ventitré e ventotto, trentuno",
            "it",
            "i tre 3 migliori, ventitré 23 e ventotto 28, trentuno 31",
        ),
        ("uno solo, sei", "it", "uno solo, sei 6"),
        # a language without a list: unchanged
        ("three", "de", "three"),
    ],
)
def test_numbers_written_as_words_get_their_digits_beside_them(text, language, expected):
    assert number_words_as_digits(text, language) == expected


def test_recall_tuning_reads_numbers_written_as_words_except_in_the_spec():
    assert RecallTuning().number_words
    assert not RecallTuning.spec_only().number_words
