"""The search half of :class:`~strata.episodic.memory.EpisodicMemory`: how a query finds
turns and summaries (dense, lexical and graph paths fused by :mod:`strata.episodic.ranking`,
with the speaker, time and neighbour signals), and the query text the dense path embeds.

It reads the in-memory state that :class:`~strata.episodic.memory.EpisodicMemory`, its only
subclass and the single writer of that state, keeps; the attributes it reads are declared here.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime

import numpy as np

from strata.clock import from_ms, to_ms
from strata.config import EpisodicSettings
from strata.episodic.neighbours import NeighbourRows
from strata.episodic.passages import SIDES, PassageIndex, quote
from strata.episodic.ranking import dense_text, ranked, speakers_named, speakers_token
from strata.episodic.turns import SUMMARY, TURN, EpisodicHit, SummaryRecord, Turn, session_place
from strata.episodic.updates import newest_first
from strata.providers.routes import ScriptRoute
from strata.retrieval.graph import KnowledgeGraph
from strata.retrieval.lexical import (
    LANGUAGE_CHARS,
    LexicalIndex,
    cjk_share,
    language_weights,
    lexical_terms,
    query_terms,
)
from strata.retrieval.vectors import VectorIndex

__all__ = ["EpisodicSearch"]

#: The characters of a query the second model is given: 128 tokens of at most 32 characters.
_ROUTED_QUERY_CHARS = 4_096


class EpisodicSearch:
    """Search over one tenant's turns and summaries (see the module docstring)."""

    tenant: str
    _settings: EpisodicSettings
    _graph: KnowledgeGraph
    _turns: dict[str, Turn]
    _summaries: dict[str, SummaryRecord]
    _turn_index: VectorIndex
    _summary_index: VectorIndex
    _turn_lexical: LexicalIndex
    _summary_lexical: LexicalIndex
    _passages: PassageIndex
    _raw: dict[str, np.ndarray]
    _route: ScriptRoute | None
    _routed_raw: dict[str, np.ndarray]
    _routed_index: VectorIndex
    _routed_rows: np.ndarray | None
    _routed_cjk: set[str]
    _routed_cjk_rows: np.ndarray | None
    _mentioned: dict[str, tuple[int, ...]]
    _order: dict[str, list[tuple[tuple[datetime, int], str]]]
    _near: NeighbourRows | None
    _speakers: Counter[str]
    _speakers_token: int | None

    def search(
        self,
        query: np.ndarray,
        *,
        query_text: str | None = None,
        top_k: int = 8,
        session_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        include_summaries: bool = True,
        exclude_turn_ids: frozenset[str] = frozenset(),
        prefer: tuple[datetime, datetime] | None = None,
        routed_query: np.ndarray | None = None,
    ) -> list[EpisodicHit]:
        """Turns and summaries most relevant to the query, optionally within a session
        and a time range ``[start, end)``; a summary matches the range if it overlaps it.

        ``prefer`` is a softer range, for one read off the query's own words ("last
        week"): turns inside it score ``1 + time_boost`` times higher, those outside
        still compete. A date in a question is as often content ("whose birthday is
        on June 8") as a limit on when something was said.

        With ``query_text``, the dense ranking (cosine to ``query``) and the lexical
        one (BM25 over ``query_text``) are fused as ``fusion_mode`` says (by default a
        weighted sum of their scores, each normalised per query), and ``score`` is the
        fused score in [0, 1]; without it, ``score`` is the cosine similarity.
        ``exclude_turn_ids`` leaves out turns the caller already has (e.g. in working memory).
        ``routed_query``: the query by the second model (:meth:`routed_query`), which the turns it
        embedded are searched with; without it they are searched by the first model's vectors.
        """
        lo = to_ms(start) if start else None
        hi = to_ms(end) if end else None

        def in_range(first_ms: int, last_ms: int) -> bool:
            return (lo is None or last_ms >= lo) and (hi is None or first_ms < hi)

        def turn_matches(key: str) -> bool:
            t = self._turns[key]
            ts = to_ms(t.timestamp)
            in_session = not session_id or t.session_id == session_id
            return in_session and in_range(ts, ts) and t.turn_id not in exclude_turn_ids

        second = routed_query if self._route is not None and len(self._routed_index) else None
        # Its opening: this runs on the shard's event loop.
        query_cjk = query_text is not None and cjk_share(query_text[:LANGUAGE_CHARS]) >= 0.5
        weights = self._fusion_weights(query_text, routed=second is not None)
        named = self._speakers_named(query_text or "")
        speaker_boost, time_boost = self._settings.speaker_boost, self._settings.time_boost
        soft = (to_ms(prefer[0]), to_ms(prefer[1])) if prefer else None
        mentioned = self._mentioned if self._settings.time_mentioned else {}

        def speaks_of(key: str) -> bool:
            # The time a turn speaks of ("next Wednesday", said on Monday) counts as well as when
            # it was said, when it is as precise as the query's: "in May" is not "on 8 May".
            span = mentioned.get(key)
            return (span is not None and soft is not None and span[0] < soft[1] and soft[0] < span[1]
                    and span[1] - span[0] <= soft[1] - soft[0])

        def factor(key: str) -> float:
            turn = self._turns[key]
            value = 1.0
            # A person named in the query: their own turns are the likelier evidence.
            if named and turn.speaker in named:
                value *= 1 + speaker_boost
            if soft is not None and (soft[0] <= to_ms(turn.timestamp) < soft[1] or speaks_of(key)):
                value *= 1 + time_boost
            return value

        use_factor = bool(named and speaker_boost) or bool(soft and time_boost)
        hits = []
        found = ranked(
            self._turn_index, self._turn_lexical, query, query_text, top_k, turn_matches, weights,
            factor=factor if use_factor else None, graph=self._graph, lexical_top=self._lexical_top,
            span=self._settings.cosine_span, fusion=self._settings.fusion_mode,
            feedback=(self._settings.dense_feedback_docs, self._settings.dense_feedback_weight),
            neighbours=(self._near_scores, self._settings.dense_context_weight) if self._near is not None else None,
            passages=(
                (self._passage_scores(second, query_cjk), self._settings.passage_dense_weight)
                if len(self._passages) else None
            ),
            dense_scores=self._routed_scores(second, query_cjk) if second is not None else None,
        )
        best_turn = found[0][0] if found else None
        for key, score, ranks, relevance in found:
            t = self._turns[key]
            text, span = self._quoted(key, query, query_text, second)
            told = self._mentioned.get(key)
            hits.append(EpisodicHit(
                TURN, t.turn_id, t.session_id, text, t.timestamp, score, (t.turn_id,),
                ranks=ranks, relevance=relevance, span=span,
                speaks_of=(from_ms(told[0]), from_ms(told[1])) if told else None,
            ))
        hits = newest_first(
            hits, lambda hit: self._raw.get(f"{hit.session_id}/{hit.id}"), lexical_terms,
            cosine=self._settings.supersede_cosine, overlap=self._settings.supersede_overlap,
        )
        if include_summaries:
            def summary_matches(key: str) -> bool:
                s = self._summaries[key]
                return (not session_id or s.session_id == session_id) and in_range(to_ms(s.start), to_ms(s.end))

            index, lexical = self._summary_index, self._summary_lexical
            # Summaries are the first model's vectors only: its weights for the query's language.
            found = ranked(index, lexical, query, query_text, top_k, summary_matches, self._fusion_weights(query_text),
                           span=self._settings.cosine_span, fusion=self._settings.fusion_mode)
            scale = 1.0
            if query_text and best_turn is not None and found:
                scale = self._summary_scale(query, query_text, weights, best_turn, found[0][0], second, query_cjk)
            for key, score, ranks, relevance in found:
                s = self._summaries[key]
                hits.append(EpisodicHit(
                    SUMMARY, s.summary_id, s.session_id, s.text, s.start, score * scale, s.turn_ids, s.end, ranks,
                    relevance,
                ))
        hits.sort(key=lambda h: -h.score)
        return hits[:top_k]

    @property
    def wants_routed_query(self) -> bool:
        """Whether this tenant has turns the second model embedded, so a search wants the query by it."""
        return self._route is not None and len(self._routed_index) > 0

    def routed_query(self, query_text: str) -> np.ndarray | None:
        """The query by the second model (what the dense path embeds of it), when this tenant has
        turns it embedded; None when not needed. The model's work (~25 ms a question here): the
        shard calls this in a worker thread, never on its event loop."""
        if self._route is None or not query_text or not len(self._routed_index):
            return None
        # The model reads 128 tokens of a query, a few characters each: a 16,000-character one
        # is not handed over whole (finding the cut of all of it took ~160 ms).
        return self._route.embed_query(self.dense_query(query_text)[:_ROUTED_QUERY_CHARS], tenant=self.tenant)

    def _routed_scores(self, second: np.ndarray, query_cjk: bool) -> Callable[[np.ndarray], np.ndarray]:
        """Each turn's cosine to the query: by the first model, and for the turns the second
        embedded by the second (``second``, the query by it), placed on the first's span (by the
        second's CJK span where ``query_cjk`` and the turn is CJK)."""
        rows = self._routed_row_numbers()
        route = self._route
        if route is None or self._routed_cjk_rows is None:
            raise RuntimeError("no second model")
        cjk = self._routed_cjk_rows[: len(rows)] & query_cjk
        placed = route.placed(self._routed_index.scores(second), self._settings.cosine_span, cjk)

        def scores(query: np.ndarray) -> np.ndarray:
            own = self._turn_index.scores(query)
            own[rows] = placed
            return own

        return scores

    def _routed_row_numbers(self) -> np.ndarray:
        """The turn index's row of each turn the second model embedded (kept until rows move)."""
        if self._routed_rows is None or self._routed_cjk_rows is None:
            ids = self._routed_index.ids
            self._routed_rows = np.asarray([self._turn_index.position(key) for key in ids], dtype=np.intp)
            self._routed_cjk_rows = np.asarray([key in self._routed_cjk for key in ids], dtype=bool)
        return self._routed_rows[: len(self._routed_index)]

    def _passage_scores(
        self, second: np.ndarray | None, query_cjk: bool
    ) -> Callable[[np.ndarray], np.ndarray | None]:
        """Each turn's best passage cosine (:meth:`PassageIndex.dense`). With ``second`` (the query
        by the second model), the turns that model embedded are scored as their own cosine is: by
        its vectors of their passages, placed on the first model's span (the first model's
        vectors of them are noise in a script it does not read); -1 until it has embedded them."""
        routed_best = None
        if second is not None and self._route is not None:
            found = self._passages.routed_dense(second, self._turn_index)
            if found is not None:
                rows = self._routed_row_numbers()
                cjk = np.zeros(len(found), dtype=bool)
                if query_cjk and self._routed_cjk_rows is not None:
                    cjk[rows] = self._routed_cjk_rows[: len(rows)]
                placed = self._route.placed(found, self._settings.cosine_span, cjk)
                routed_best = np.where(found > -1.0, placed, -1.0).astype(np.float32)

        def scores(query: np.ndarray) -> np.ndarray | None:
            best = self._passages.dense(query, self._turn_index)
            if second is not None:
                if best is not None:
                    best[self._routed_row_numbers()] = -1.0
                if routed_best is not None:
                    best = routed_best if best is None else np.where(routed_best > -1.0, routed_best, best)
            return best

        return scores

    def _quoted(
        self, key: str, query: np.ndarray, query_text: str | None, second: np.ndarray | None = None,
    ) -> tuple[str, tuple[str, int, int] | None]:
        """A turn's text as its hit shows it: whole, or for a long turn its short side and the
        passage of the long one that matches best (with where that passage lies; by the second
        model's vectors where it embedded the passages, ``second`` the query by it)."""
        turn = self._turns[key]
        passage = self._passages.best(key, query, query_text, second)
        if passage is None:
            return turn.text, None
        long_sides = {p.side for p in self._passages.passages(key)}
        labels = {"user": turn.speaker or "user", "agent": "assistant"}
        parts = []
        for side in SIDES:
            said = getattr(turn, side)
            if not said:
                continue
            if side == passage.side:
                parts.append(quote(labels[side], said, passage.start, passage.end))
            elif side not in long_sides:
                parts.append(f"{labels[side]}: {said}")
        return "\n".join(parts), (passage.side, passage.start, passage.end)

    def _summary_scale(
        self, query: np.ndarray, text: str, weights: Mapping[str, float], best_turn: str, best_summary: str,
        second: np.ndarray | None = None, query_cjk: bool = False,
    ) -> float:
        """What the summaries' fused scores are multiplied by before they are merged with the turns'.

        Each list's fused scores are normalised to its own best hit, so the best summary of any
        search scores near 1, as the best turn does, however much better the turn matches: a
        just-written turn searched by its own words, a term no other text has among them, came
        within 0.011 of a summary of earlier copies of its sentence. Both bests are measured on
        one scale (the fusion weights over the cosine placed on the embedder's span, unclipped,
        and the share of the query's BM25 maximum the hit scores), and the summaries are moved
        down by the ratio when their best matches less well; never up. The order within each
        list does not change, so neither do the turns a search returns, only where summaries
        fall among them. A turn the second model embedded is measured by it (``second``: the
        query by it), placed on the first's span.
        """
        lo, hi = self._settings.cosine_span

        def match(cosine: float, lexical: LexicalIndex, key: str) -> float:
            value = weights.get("dense", 0.0) * (cosine - lo) / (hi - lo)
            if weights.get("lexical"):
                value += weights["lexical"] * lexical.relevance(text, [key])[key]
            return value

        if self._summary_index.position(best_summary) is None:  # a summary stored without a vector
            return 1.0
        cosine = float(self._raw[best_turn] @ query)  # its own vector, not its neighbours'
        if second is not None and self._route is not None and best_turn in self._routed_raw:
            cjk = query_cjk and best_turn in self._routed_cjk
            cosine = float(self._route.placed(np.asarray([self._routed_raw[best_turn] @ second]), (lo, hi), cjk)[0])
        turn = match(cosine, self._turn_lexical, best_turn)
        summary_cosine = float(self._summary_index.vectors([best_summary])[0] @ query)
        summary = match(summary_cosine, self._summary_lexical, best_summary)
        return 1.0 if turn <= 0 or summary >= turn else max(summary, 0.0) / turn

    def dense_query(self, text: str) -> str:
        """The query to embed: ``text`` without the speaker names it mentions.

        Speakers are matched by the speaker-aware factor in :meth:`search`; left
        in a short question, a name dominates its embedding and pulls in every
        turn near that name instead of the ones about the question's content.
        A text of :data:`NAMES_KEPT_FROM` characters or more keeps its names: in
        it they are a small share, and the changed text would be embedded a second
        time (~80 ms of model for a message of the maximum length).
        """
        return dense_text(text, self._speakers)

    @property
    def speakers_token(self) -> int:
        """A number that changes when the tenant's speaker labels do (:func:`speakers_token`):
        a caller that keeps the labels, to make :meth:`dense_query`'s text itself, knows by it
        when to read them again (:meth:`speakers`)."""
        if self._speakers_token is None:
            self._speakers_token = speakers_token(self._speakers)
        return self._speakers_token

    def speakers(self) -> list[str]:
        """The tenant's speaker labels, sorted."""
        return sorted(self._speakers)

    def _speakers_named(self, text: str) -> set[str]:
        """Speaker labels of this tenant that ``text`` mentions (whole words; CJK names as substrings)."""
        return speakers_named(self._speakers, text)

    def _lexical_top(self, text: str, k: int, keep: Callable[[str], bool]) -> list[tuple[str, float]]:
        """Turns by BM25, each with a share of the best score among its session
        neighbours (``lexical_context_window`` turns either side, in time order).

        A question often names one fact and asks for another ("the one who only
        finished high school: where do they work?"); the turn holding the answer
        shares few words with it, its neighbour the rest. Neighbour scores come
        from the best ``4 k`` matches (at least 200), bisected into their session's
        time order, so a long session costs no more than a short one; a turn
        outside those matches counts only its neighbour's share (its own score is
        below the 200th, so the top ``k`` hardly moves).

        With ``lexical_feedback_docs``, the query also holds the feedback terms of
        its best matches (:meth:`LexicalIndex.feedback_terms`).
        """
        s = self._settings
        extra: dict[str, float] | None = None
        if s.lexical_feedback_docs and s.lexical_feedback_weight:
            found = self._turn_lexical.feedback_terms(text, s.lexical_feedback_docs, s.lexical_feedback_terms)
            mass = s.lexical_feedback_weight * len(query_terms(text))
            extra = {term: mass * weight for term, weight in found.items()}
        weight, window = s.lexical_context_weight, s.lexical_context_window
        if not (weight and window) and not len(self._passages):
            return self._turn_lexical.top_scored(text, k, keep, extra=extra)
        own = dict(self._turn_lexical.top_scored(text, max(4 * k, 200), extra=extra))
        # A long turn scores as its best passage, when that beats its opening.
        for key, score in self._passages.lexical(text, max(4 * k, 200), extra=extra).items():
            if score > own.get(key, 0.0):
                own[key] = score
        if not (weight and window):
            weight = 0.0
        near: dict[str, float] = {}
        for key, score in own.items():
            turn = self._turns[key]
            order = self._order.get(turn.session_id)
            if not order:
                continue
            i = bisect.bisect_left(order, session_place(turn, key))
            for j in range(max(i - window, 0), min(i + window + 1, len(order))):
                other = order[j][1]
                if j != i and score > near.get(other, 0.0):
                    near[other] = score
        combined = {key: own.get(key, 0.0) + weight * near.get(key, 0.0) for key in own.keys() | near.keys()}
        ranked = sorted(combined.items(), key=lambda item: (-item[1], item[0]))
        found_keys = (item for item in ranked if keep(item[0]))  # keep() only until k are found
        return list(itertools.islice(found_keys, k))

    def _near_scores(self, scores: np.ndarray) -> np.ndarray:
        """For each turn of the index, the best of ``scores`` among its session neighbours."""
        if self._near is None:
            raise RuntimeError("no neighbour rows: dense_context_weight or dense_context_window is 0")
        return self._near.best(scores)

    def _fusion_weights(self, query_text: str | None, *, routed: bool = False) -> dict[str, float]:
        """The paths' weights for this query; ``routed``: the CJK turns' cosines are the second
        model's, which reads CJK, so a CJK query keeps the Latin dense weight."""
        s = self._settings
        if not query_text:
            return {"dense": 1.0}
        configured = {
            "dense": s.fusion_dense_weight, "lexical": s.fusion_lexical_weight, "graph": s.fusion_graph_weight,
        }
        dense_cjk = s.fusion_dense_weight if routed else s.dense_weight_cjk
        return language_weights(configured, query_text, dense_cjk=dense_cjk)
