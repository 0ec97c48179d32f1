"""Terms of a text, as the lexical paths see them: Latin words and CJK bigrams, stop words out.

BM25 (:mod:`strata.retrieval.lexical`), the knowledge graph, summaries, skills and the
working layer's importance rules all tokenise through :func:`extract_terms`, so a word
means the same thing to each of them.
"""

from __future__ import annotations

import re
import threading

import Stemmer  # PyStemmer

__all__ = ["CJK_STOP_CHARS", "ENGLISH_STOP_WORDS", "LATIN_WORD", "extract_terms", "normalise", "stemmed_words"]

ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    [
        "a", "about", "above", "after", "again", "against", "all", "also", "am", "an", "and", "any", "are", "aren't",
        "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't",
        "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during",
        "each", "few", "for", "from", "further", "get", "got", "had", "hadn't", "has", "hasn't", "have", "haven't",
        "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his",
        "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its",
        "itself", "just", "let's", "like", "me", "more", "most", "much", "must", "mustn't", "my", "myself", "no", "nor",
        "not", "now", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out",
        "over", "own", "please", "really", "same", "said", "say", "says", "shan't", "she", "she'd", "she'll", "she's",
        "should", "shouldn't", "so", "some", "such", "than", "that", "that's", "the", "their", "theirs", "them",
        "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this",
        "those", "through", "to", "too", "under", "until", "up", "us", "very", "was", "wasn't", "we", "we'd", "we'll",
        "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while",
        "who", "who's", "whom", "why", "why's", "will", "with", "won't", "would", "wouldn't", "yes", "yeah", "you",
        "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "ok", "okay", "thanks",
        "thank", "hi", "hello", "hey", "one", "also", "well", "still", "even", "want", "need", "know", "think", "make",
        "sure", "thing", "things", "something", "anything", "remember", "mentioned", "told", "going", "back", "earlier",
        "previously"
    ]
)

# Function characters; a bigram made only of these ("我们", "这个") carries no topic.
CJK_STOP_CHARS: frozenset[str] = frozenset(
    "的了是我你他她它们在和与也就都吗呢吧啊呀哦嗯这那个一有不没要会把被给对说很还又再从到"
    "着过得地之其而及或但并如果因为所以可以能就是么什怎样哪里些"
)

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
LATIN_WORD = re.compile(r"[0-9a-z\u00c0-\u024f]+(?:'[a-z]+)*")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\uff07": "'"})


def normalise(text: str) -> str:
    """``text`` lower-cased, with typographic apostrophes made plain."""
    return text.translate(_APOSTROPHES).lower()


_stemmers = threading.local()  # a PyStemmer object is not safe to share between threads


def _stem(word: str) -> str:
    """The word's Snowball English (Porter2) stem: "painted", "painting" and "paints" all
    meet "paint", "adoption" meets "adopting". Linear in the word's length, about 1 us a word.
    Plural folding alone, before: LoCoMo R@10 0.778, R@5 0.680 (docs/retrieval-ablation.md)."""
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    stem: str = stemmer.stemWord(word)
    return stem


def stemmed_words(text: str) -> list[tuple[str, str]]:
    """Each Latin word of ``text`` that :func:`extract_terms` keeps, as (its term, the word):
    what a stem such as "hike" was written as, for showing terms to people."""
    return _stemmed_words(normalise(text))


def _term(word: str) -> str:
    """A word's term: its stem, or for a run of digits the number it writes, so "07月15日" meets
    "7月15日" and "07/05" meets "7/5" (the leading zeros out; "0" stays)."""
    if word.isdigit():
        return word.lstrip("0") or "0"
    return _stem(word)


def _stemmed_words(lowered: str) -> list[tuple[str, str]]:
    return [
        (_term(word), word)
        for word in LATIN_WORD.findall(lowered)
        # Single digits stay: "6月8日" and "May 8" are found by their numbers.
        if (len(word) > 1 or word.isdigit()) and word not in ENGLISH_STOP_WORDS
    ]


def extract_terms(text: str) -> frozenset[str]:
    """Return the distinctive terms of ``text`` used for overlap rules.

    Latin words are lower-cased, stop words and one-letter words (not digits) removed and
    stemmed (a run of digits becomes its number: leading zeros out); CJK runs become character
    bigrams (bigrams made only of function characters are dropped; a lone character counts as a
    unigram).
    """
    lowered = normalise(text)
    terms = {term for term, _ in _stemmed_words(lowered)}
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            if run not in CJK_STOP_CHARS:
                terms.add(run)
            continue
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if bigram[0] in CJK_STOP_CHARS and bigram[1] in CJK_STOP_CHARS:
                continue
            terms.add(bigram)
    return frozenset(terms)
