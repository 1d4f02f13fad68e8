"""Recall ranking and link expansion: pure functions, no I/O.

The recall service searches, verifies the hits against PostgreSQL and passes the
eligible ones here as *seeds*, best first (seed rank 1 = best fused rank). Expansion
then asks two callbacks, at most once per hop each, so that the caller can answer every
call with one batched query:

- ``links_of(card_ids)``: the outgoing links ``(target_id, meaning)`` of each card;
- ``eligible(card_ids)``: which of these cards are current, in the workspace, pass the
  recall filters and family restrictions, are not pending and not already decided.

Neither callback is ever asked about a card twice: ``eligible`` never about a seed,
``links_of`` only about seeds and cards ``eligible`` accepted, so both stay within
the 200-card budget in total.

Rules (docs/recall.md):

- A direct hit at seed rank ``r`` scores ``1 / (60 + r)``. A card reached by a path of
  ``h`` hops from seed ``s`` gets the linked contribution ``1 / (60 + r_s) * 0.5**h``;
  only its strongest linked contribution counts, so repeated paths never add votes.
  Final score = direct score + strongest linked contribution; ties use the card id.
- Outgoing links only, at most two hops. Every card on a path, bridge or destination,
  must be eligible: an ineligible card is neither returned nor followed.
- Per card, the first 20 outgoing links in target-id order. In total, 200 distinct
  cards (seeds included) and 400 inspected links.

Seed order (``bench/quality_bench.py`` measures it): the seed
rank is the card's place in a reciprocal rank fusion (k = 60) of three signals instead
of two, see ``order_seeds``: its dense rank, its BM25 rank and its *coverage* rank.
Coverage is the share of the card's indexed vocabulary that the question contains,
each term weighted by its IDF among the candidates: BM25 asks how much of the question
a card holds, coverage asks how much of the card the question is about, which ranks a
card that merely shares a clause with the question below one that fits it whole.

Language-aware fusion (``RecallTuning``, ablated by the quality bench,
docs/quality.md): a question in another language than the workspace's (told by
the stop words it uses) loses that language's stop words before BM25, and its seeds
are ordered by the dense rank (BM25 weight 0, no coverage): across languages,
BM25 and coverage only meet names and identifiers, and on the cross-lingual dev half
they cost more than they bring. Such a question's seeds get instead a further RRF term
of weight 0.5 (``feedback_ranks``): their coverage of the question expanded with the
terms of its three first dense neighbours, the question's meaning in the cards' own
words (pseudo-relevance feedback limited to the seeds: no extra round trip).
For questions in the workspace's language the feedback is off (``feedback`` 0): it
costs on the dev half (docs/quality.md).

Named titles (``RecallTuning.titles``): a seed whose whole title (the phrase
the card explains, through the workspace's analyzer) is in the question gets a further
RRF term after the first seed, which stays first (``lift_named_titles``). Knowledge is
written again in other words for every question that needs it; when a question names
what several near-identical cards explain, the title says which ones it needs, and the
fused first answer, where both branches agree, is still the best single one. A title
that goes on to define what it names ("race no. refers to raceId", the head of a
card's own text used as its title) names only what comes before its first definition
marker (``title_name``): no question says the whole definition.

Numbers in digits (``RecallTuning.number_words``): a question's numbers written as
words reach BM25 (and so coverage and named titles) as the word and its digits, the
way knowledge writes them (``number_words_as_digits``).

Choices where the rules leave room:

- Paths are simple: a path never visits a card twice, so no path leads back to its
  own seed. A seed's linked contribution therefore only comes from *other* seeds
  (A -> B -> A does not reward A). Seeds reached from another seed act as bridges like
  any other eligible card (A -> B -> C is a two-hop path from A even when B is a seed).
- Traversal is breadth first: all hop-one links (seeds in rank order, each seed's links
  in target-id order), then all hop-two links (bridges from the strongest to the
  weakest, ties by card id). A budget stops expansion at the first link that would
  exceed it: the 401st distinct inspected link, or the first link whose target would be
  the 201st distinct card. That link and everything after it are ignored, and a
  stop during hop one means there is no hop two. Links followed before the stop keep
  their effect, so a budget always cuts the weakest part of the traversal.
- A link counts as inspected once (per source and target): a seed's links, inspected
  at hop one, are not counted again when the seed bridges at hop two.
- Equally strong linked paths are ordered by fewer hops, then path ids, then meanings.
- Card ids compare as strings; with ``mem-<uuid>`` ids in lower case this is the
  same order as PostgreSQL's uuid order, so SQL can pre-sort the links identically.
- More than one link to the same target (the archive forbids it) keeps the smallest
  meaning; a self-link (also forbidden) is inspected and leads nowhere.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Literal

from tht.errors import InvalidInput

RRF_K = 60
HOP_DECAY = 0.5
MAX_HOPS = 2
MAX_TOP = 100
MAX_LINKS_PER_CARD = 20
MAX_CARD_LOOKUPS = 200
MAX_INSPECTED_LINKS = 400

# where a title stops naming and starts defining (``title_name``): regular
# expressions, matched case-insensitively. The first four are the usual ones; the
# others are how the dev half's knowledge also defines ("Tiago Pasqualini is the
# DisplayName", "total enrollment can be represented by ...", "most common bond type
# refers MAX(...)"), chosen there (docs/quality.md)
DEFINITION_MARKERS: tuple[str, ...] = (
    "=",
    r"\brefers?\s+to\b",
    r"\bmeans?\b",
    r"\bstands?\s+for\b",
    r"\b(?:is|are)\s+(?:both\s+)?(?:the|a|an)\b",
    r"\brefers?\b",
    r"\bcan\s+be\s+(?:computed|calculated|acquired|represented)\s+by\b",
    r"\bis\s+represented\s+by\b",
    r"\brepresents?\b",
    r"\bindicates?\b",
)

# numbers written as words, per language (``number_words_as_digits``): the units and
# teens, the tens, and how a ten joins a unit ("forty-five", "quarantacinque"). "one",
# "uno" and "una" are left out: as pronouns and articles they are far more frequent
# than as numbers
_UNITS = {
    "en": (
        "zero",
        "",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ),
    "it": (
        "zero",
        "",
        "due",
        "tre",
        "quattro",
        "cinque",
        "sei",
        "sette",
        "otto",
        "nove",
        "dieci",
        "undici",
        "dodici",
        "tredici",
        "quattordici",
        "quindici",
        "sedici",
        "diciassette",
        "diciotto",
        "diciannove",
    ),
}
_TENS = {
    "en": ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"),
    "it": (
        "venti",
        "trenta",
        "quaranta",
        "cinquanta",
        "sessanta",
        "settanta",
        "ottanta",
        "novanta",
    ),
}
_JOINED_UNITS = {
    "en": ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
    "it": ("uno", "due", "tre", "quattro", "cinque", "sei", "sette", "otto", "nove"),
}

LinksOf = Callable[[list[str]], Mapping[str, Sequence[tuple[str, str]]]]
"""Outgoing links ``(target_id, meaning)`` of each requested card; a missing card has none."""
EligibleOf = Callable[[list[str]], Collection[str]]
"""The subset of the requested cards that recall may return or follow."""
Budget = Literal["card_lookups", "inspected_links"]


@dataclass(frozen=True)
class RankedCard:
    """One recall result.

    ``score`` is a ranking score (reciprocal rank fusion plus the strongest link
    contribution): it orders the results of one request and is neither a similarity
    nor a confidence. ``path`` runs from a seed to this card along the strongest link
    path, or is just ``(card_id,)`` for an exclusively direct result; ``meanings`` are
    the meanings of the links along it (``hops`` of them). ``seed_rank`` is this card's
    own rank as a direct hit, ``None`` if it was reached by links only.
    """

    card_id: str
    score: float
    path: tuple[str, ...]
    seed_rank: int | None
    hops: int
    meanings: tuple[str, ...]


@dataclass(frozen=True)
class RecallRanking:
    """The ranked cards and what expansion spent; ``stopped_by`` names an exhausted budget."""

    cards: tuple[RankedCard, ...]
    card_lookups: int
    inspected_links: int
    stopped_by: Budget | None


def validate_top(top: int) -> int:
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise InvalidInput(f"top must be an integer between 1 and {MAX_TOP}", details={"top": top})
    return top


def seed_count(top: int) -> int:
    """How many seeds search requests: more than ``top``, so links can promote cards."""
    return min(MAX_TOP, max(20, 3 * validate_top(top)))


def direct_score(seed_rank: int) -> float:
    return 1 / (RRF_K + seed_rank)


@dataclass(frozen=True)
class RecallTuning:
    """Which of our additions to the spec's ranking are on (all, by default); the
    quality bench measures each one's ablation. ``spec_only()`` is the spec's fusion
    (RRF of the dense and BM25 ranks) with its link scoring and nothing of ours."""

    coverage: bool = True
    # a question in another language than the workspace's: BM25 without its stop words
    language_aware: bool = True
    # ... and for such a question, the coverage signal (its words rarely are the cards')
    # and the weight of the BM25 rank in the seed order (1: the spec's RRF)
    coverage_across_languages: bool = False
    bm25_weight_across_languages: float = 0.0
    # feedback from the dense neighbours (``feedback_ranks``), a further RRF term of
    # weight ``feedback_weight``: how many neighbours lend their terms (0: off), for a
    # question in the workspace's language (tried, rejected) and in another language
    feedback: int = 0
    feedback_across_languages: int = 3
    feedback_weight: float = 0.5
    # search at least this many seeds (the spec's count, ``seed_count``, when larger):
    # tried at 60 and 100, rejected (docs/quality.md)
    seeds_at_least: int = 0
    # the seeds whose whole title the question names follow the first seed
    # (``lift_named_titles``), their title rank fused with this weight
    titles: bool = True
    title_weight: float = 0.25
    # a title names what comes before the first of these markers (``title_name``;
    # empty: the whole title)
    title_markers: tuple[str, ...] = DEFINITION_MARKERS
    # a question's numbers written as words meet BM25 as digits too (``number_words_as_digits``)
    number_words: bool = True

    @classmethod
    def spec_only(cls) -> RecallTuning:
        return cls(
            coverage=False,
            language_aware=False,
            feedback_across_languages=0,
            titles=False,
            number_words=False,
        )


def title_name(title: str, markers: Sequence[str] = DEFINITION_MARKERS) -> str:
    """What a title names: the text before its first definition marker ("Race no."
    for "race no. refers to raceId"), the whole title when it has none or nothing
    comes before the marker. A title that goes on to define its name is longer than
    any question that names it, so the whole of it is never named."""
    if not markers:
        return title
    head = _marker_pattern(tuple(markers)).split(title, maxsplit=1)[0].strip(" ,:;")
    return head or title


@lru_cache(maxsize=8)
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(r"\s*(?:" + "|".join(markers) + r")\s*", re.IGNORECASE)


@lru_cache(maxsize=4)
def _number_words(language: str) -> tuple[re.Pattern[str], dict[str, str]]:
    value = {word: str(n) for n, word in enumerate(_UNITS[language]) if word}
    for step, ten in enumerate(_TENS[language], start=2):
        value[ten] = str(10 * step)
        for unit, word in enumerate(_JOINED_UNITS[language], start=1):
            if language == "en":
                value[f"{ten}-{word}"] = value[f"{ten} {word}"] = str(10 * step + unit)
            else:  # "ventuno", "ventotto", "ventitré": the ten's vowel drops before a vowel
                stem = ten[:-1] if word[0] in "uo" else ten
                joined = stem + ("tré" if word == "tre" else word)
                value[joined] = value[joined.replace("é", "e")] = str(10 * step + unit)
    alternatives = sorted(value, key=len, reverse=True)  # "forty-five" before "forty"
    pattern = re.compile(
        r"\b(?:" + "|".join(re.escape(word) for word in alternatives) + r")\b", re.IGNORECASE
    )
    return pattern, value


def number_words_as_digits(text: str, language: str) -> str:
    """The text with the digits of each number written as a word (two to ninety-nine,
    in ``language``) after the word: knowledge writes "over 19" and "top 3", an asker
    also "over nineteen" and "top three", and BM25 only meets the same term; the word
    stays for the knowledge that writes it too ("three letter codes"). A language
    without a list leaves the text as it is."""
    if language not in _UNITS:
        return text
    pattern, value = _number_words(language)
    return pattern.sub(lambda match: f"{match.group()} {value[match.group().lower()]}", text)


@dataclass(frozen=True)
class SeedSignals:
    """A verified direct hit before ordering: its rank in each search branch (None
    when that branch did not return it) and the BM25 terms of its indexed text."""

    card_id: str
    dense_rank: int | None
    bm25_rank: int | None
    terms: frozenset[int]


def _candidate_idf(candidates: Sequence[SeedSignals]) -> tuple[dict[int, float], float]:
    """Each term's IDF among the candidates (BM25's formula), and the IDF of a term no
    candidate holds."""
    df = Counter(chain.from_iterable(candidate.terms for candidate in candidates))
    n = len(candidates)
    # a term's IDF depends only on its count: n logarithms instead of one per term
    by_count = [math.log(1 + (n - count + 0.5) / (count + 0.5)) for count in range(n + 1)]
    return {term: by_count[count] for term, count in df.items()}, by_count[0]


def coverage_shares(
    question_terms: Collection[int], candidates: Sequence[SeedSignals]
) -> dict[str, float]:
    """The IDF-weighted share of each candidate's terms that the question holds, with
    IDF computed over the candidates themselves (BM25's formula): a term most
    candidates share, like the workspace's own jargon, weighs little."""
    idf, _ = _candidate_idf(candidates)
    asked = frozenset(question_terms)
    weight = idf.__getitem__
    shares = {}
    for candidate in candidates:
        total = sum(map(weight, candidate.terms))
        shares[candidate.card_id] = (
            sum(map(weight, candidate.terms & asked)) / total if total else 0.0
        )
    return shares


def _by_dense_rank(candidate: SeedSignals) -> tuple[float, str]:
    rank = candidate.dense_rank
    return (rank if rank is not None else math.inf, candidate.card_id)


def feedback_terms(candidates: Sequence[SeedSignals], neighbours: int) -> frozenset[int]:
    """The terms of the ``neighbours`` candidates the dense branch ranks first (pseudo-
    relevance feedback limited to the workspace's own cards: their words, in the
    workspace's language, whatever the question's)."""
    by_dense = sorted((c for c in candidates if c.dense_rank is not None), key=_by_dense_rank)
    return frozenset(chain.from_iterable(c.terms for c in by_dense[:neighbours]))


def feedback_ranks(
    question_terms: Collection[int], candidates: Sequence[SeedSignals], neighbours: int
) -> dict[str, int]:
    """Each candidate's rank by its coverage of the question expanded with the terms of
    its ``neighbours`` first dense neighbours, equal coverage ordered by the dense rank
    (then card id). A question in another language shares few terms with the cards, so
    its coverage says little; the neighbours' terms are the question's meaning in the
    cards' own words, and a card that fits them whole (the sibling of a dense hit, one
    sentence of the same rule) comes up. Ties follow the dense rank because many short
    cards cover the expanded question whole: their card ids would scatter them."""
    expanded = frozenset(question_terms) | feedback_terms(candidates, neighbours)
    shares = coverage_shares(expanded, candidates)
    ordered = sorted(candidates, key=lambda c: (-shares[c.card_id], *_by_dense_rank(c)))
    return {c.card_id: rank for rank, c in enumerate(ordered, start=1)}


def _ranks(scores: Mapping[str, float]) -> dict[str, int]:
    """Ranks by descending score, equal scores by card id."""
    chosen = sorted(scores, key=lambda card_id: (-scores[card_id], card_id))
    return {card_id: rank for rank, card_id in enumerate(chosen, start=1)}


def order_seeds(
    question_terms: Collection[int],
    candidates: Sequence[SeedSignals],
    *,
    coverage: bool = True,
    bm25_weight: float = 1.0,
    feedback: int = 0,
    feedback_weight: float = 0.5,
    titles: Mapping[str, frozenset[int]] | None = None,
    title_weight: float = 0.25,
) -> list[str]:
    """The seeds, best first: RRF (k = 60) of dense rank, BM25 rank and coverage rank
    (among the candidates; equal coverage ordered by card id); equal scores by card id.
    Without ``coverage``: the spec's RRF of the dense and BM25 ranks alone; the BM25
    rank's term is multiplied by ``bm25_weight``. ``feedback`` > 0 adds the
    ``feedback_ranks`` of that many dense neighbours, its term multiplied by
    ``feedback_weight``. ``titles`` (each candidate's title terms) then lifts the
    candidates the question names (``lift_named_titles``)."""
    if len({c.card_id for c in candidates}) != len(candidates):
        raise ValueError("candidates must be distinct card ids")
    extra_ranks: list[tuple[dict[str, int], float]] = []  # (ranks, weight)
    if coverage:
        extra_ranks.append((_ranks(coverage_shares(question_terms, candidates)), 1.0))
    if feedback > 0:
        extra_ranks.append((feedback_ranks(question_terms, candidates, feedback), feedback_weight))

    def fused(c: SeedSignals) -> float:
        weighted = ((c.dense_rank, 1.0), (c.bm25_rank, bm25_weight))
        score = sum(w / (RRF_K + r) for r, w in weighted if r is not None)
        for ranks, weight in extra_ranks:
            rank = ranks.get(c.card_id)
            score += weight / (RRF_K + rank) if rank is not None else 0.0
        return score

    order = [c.card_id for c in sorted(candidates, key=lambda c: (-fused(c), c.card_id))]
    if titles is None:
        return order
    return lift_named_titles(
        order, named_title_weights(question_terms, candidates, titles), title_weight
    )


def named_title_weights(
    question_terms: Collection[int],
    candidates: Sequence[SeedSignals],
    titles: Mapping[str, frozenset[int]],
) -> dict[str, float]:
    """The candidates whose title's BM25 terms are all terms of the question (the
    question names what the card explains), each with the IDF of its title's terms
    among the candidates: a rare name says more than a common word."""
    asked = frozenset(question_terms)
    named = {
        c.card_id: title for c in candidates if (title := titles.get(c.card_id)) and title <= asked
    }
    if not named:  # most questions name no title: the IDF is not needed
        return {}
    idf, unseen = _candidate_idf(candidates)
    return {
        card_id: sum(idf.get(term, unseen) for term in title) for card_id, title in named.items()
    }


def lift_named_titles(order: Sequence[str], named: Mapping[str, float], weight: float) -> list[str]:
    """The seed order with the cards the question names lifted: after the first seed,
    which stays first, the seeds are ordered by RRF of their place in ``order`` and,
    with ``weight``, their rank among the named ones (heaviest title first, then by
    place). The fused first seed is the best single answer when both branches agree on
    it; a named title mostly tells which of its near-identical siblings the question
    also needs, so it fills the rest of the short list."""
    if not named or len(order) < 2:
        return list(order)
    place = {card_id: rank for rank, card_id in enumerate(order, start=1)}
    by_weight = sorted(named, key=lambda card_id: (-named[card_id], place[card_id]))
    title_rank = {card_id: rank for rank, card_id in enumerate(by_weight, start=1)}

    def fused(card_id: str) -> float:
        rank = title_rank.get(card_id)
        return 1 / (RRF_K + place[card_id]) + (weight / (RRF_K + rank) if rank else 0.0)

    return [order[0], *sorted(order[1:], key=lambda card_id: (-fused(card_id), place[card_id]))]


@dataclass(frozen=True)
class _LinkedPath:
    contribution: float
    path: tuple[str, ...]
    meanings: tuple[str, ...]

    @property
    def hops(self) -> int:
        return len(self.path) - 1

    def strength_order(self) -> tuple[float, int, tuple[str, ...], tuple[str, ...]]:
        # A total order, so the chosen path does not depend on traversal order.
        return (-self.contribution, self.hops, self.path, self.meanings)


def rank_recall(
    seeds: Sequence[str], *, top: int, links_of: LinksOf, eligible: EligibleOf
) -> RecallRanking:
    """Rank the seeds (eligible direct hits, best first) together with the eligible cards
    their outgoing links reach within two hops, and keep the best ``top``."""
    validate_top(top)
    if len(set(seeds)) != len(seeds):
        raise ValueError("seeds must be distinct card ids")
    if len(seeds) > MAX_TOP:
        raise ValueError(f"at most {MAX_TOP} seeds (see seed_count)")

    expansion = _Expansion(seeds, links_of, eligible)
    expansion.run()
    seed_ranks = expansion.seed_ranks
    ranked = []
    for card_id in seed_ranks.keys() | expansion.strongest.keys():
        rank = seed_ranks.get(card_id)
        linked = expansion.strongest.get(card_id)
        score = (direct_score(rank) if rank else 0.0) + (linked.contribution if linked else 0.0)
        ranked.append(
            RankedCard(
                card_id=card_id,
                score=score,
                path=linked.path if linked else (card_id,),
                seed_rank=rank,
                hops=linked.hops if linked else 0,
                meanings=linked.meanings if linked else (),
            )
        )
    ranked.sort(key=lambda card: (-card.score, card.card_id))
    return RecallRanking(
        cards=tuple(ranked[:top]),
        card_lookups=len(expansion.eligibility),
        inspected_links=len(expansion.inspected),
        stopped_by=expansion.stopped_by,
    )


def _considered_links(links: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    by_target: dict[str, str] = {}
    for target, meaning in sorted(links):
        by_target.setdefault(target, meaning)
    return list(by_target.items())[:MAX_LINKS_PER_CARD]


def _strongest_first(frontier: Mapping[str, Sequence[_LinkedPath]]) -> list[str]:
    # Hop one thus visits seeds in rank order; a budget then cuts the weakest sources.
    return sorted(
        frontier, key=lambda card_id: (min(p.strength_order() for p in frontier[card_id]), card_id)
    )


class _Expansion:
    def __init__(self, seeds: Sequence[str], links_of: LinksOf, eligible: EligibleOf) -> None:
        self.seed_ranks = {card_id: rank for rank, card_id in enumerate(seeds, start=1)}
        self._links_of = links_of
        self._eligible = eligible
        # Every card counted against the lookup budget: the seeds (verified by the
        # caller) and each card whose eligibility was asked.
        self.eligibility: dict[str, bool] = dict.fromkeys(self.seed_ranks, True)
        self.links: dict[str, list[tuple[str, str]]] = {}
        self.inspected: set[tuple[str, str]] = set()
        self.stopped_by: Budget | None = None
        self.strongest: dict[str, _LinkedPath] = {}

    def run(self) -> None:
        # Each hop extends the paths that reached its sources; a seed starts a path of
        # zero hops carrying its direct score.
        frontier = {
            seed: [_LinkedPath(direct_score(rank), (seed,), ())]
            for seed, rank in self.seed_ranks.items()
        }
        for _hop in range(MAX_HOPS):
            if not frontier:
                return
            reached: dict[str, list[_LinkedPath]] = {}
            for source, target, meaning in self._walk(_strongest_first(frontier)):
                if not self.eligibility[target]:
                    continue
                for before in frontier[source]:
                    if target in before.path:  # paths are simple: never back to a visited card
                        continue
                    path = _LinkedPath(
                        before.contribution * HOP_DECAY,
                        (*before.path, target),
                        (*before.meanings, meaning),
                    )
                    reached.setdefault(target, []).append(path)
                    self._offer(target, path)
            if self.stopped_by:
                return
            frontier = reached

    def _walk(self, sources: list[str]) -> list[tuple[str, str, str]]:
        """The links ``(source, target, meaning)`` one hop follows, in traversal order,
        up to the first link that would exceed a budget. New targets are looked up in
        one batch; ``sources`` are all eligible."""
        self._fetch_links([card_id for card_id in sources if card_id not in self.links])
        followed: list[tuple[str, str, str]] = []
        to_look_up: dict[str, None] = {}  # ordered set
        for source in sources:
            for target, meaning in self.links[source]:
                if (source, target) not in self.inspected:
                    if len(self.inspected) == MAX_INSPECTED_LINKS:
                        self.stopped_by = "inspected_links"
                        break
                    if target not in self.eligibility and target not in to_look_up:
                        if len(self.eligibility) + len(to_look_up) == MAX_CARD_LOOKUPS:
                            self.stopped_by = "card_lookups"
                            break
                        to_look_up[target] = None
                    self.inspected.add((source, target))
                followed.append((source, target, meaning))
            if self.stopped_by:
                break
        self._look_up(list(to_look_up))
        return followed

    def _fetch_links(self, card_ids: list[str]) -> None:
        if not card_ids:
            return
        answer = self._links_of(card_ids)
        for card_id in card_ids:
            self.links[card_id] = _considered_links(answer.get(card_id, ()))

    def _look_up(self, card_ids: list[str]) -> None:
        if not card_ids:
            return
        answer = set(self._eligible(card_ids))
        for card_id in card_ids:
            self.eligibility[card_id] = card_id in answer

    def _offer(self, card_id: str, path: _LinkedPath) -> None:
        current = self.strongest.get(card_id)
        if current is None or path.strength_order() < current.strength_order():
            self.strongest[card_id] = path
