"""PII written to slip past the rules: Unicode look-alikes, odd separators, spelled-out emails, and the types
added for them (SSNs, passports); the speaker label and metadata redacted like the text; the normalised view's
offsets; and the evasion corpus's figures."""

from __future__ import annotations

import pytest

from strata.config import PII_TYPES, PIISettings
from strata.privacy.normalize import normal_view
from strata.privacy.pii import RuleDetector
from strata.privacy.redaction import Redaction, Redactor
from strata.schema import InteractionIn, TurnIn
from strata_bench.pii import EVASION_CORPUS, evaluate, load_corpus

DETECTOR = RuleDetector()
MASK = Redactor(DETECTOR, dict.fromkeys(PII_TYPES, "mask"), hash_key=b"test-key")
# Look-alikes are built from code points, so a reader sees which: full-width forms sit at U+FF01..FF5E, 0xFEE0 above
# their ASCII letter (the space's is the ideographic space); Arabic-Indic digits at U+0660..0669.
FW = str.maketrans({c: chr(ord(c) + 0xFEE0) for c in "0123456789-+()@."} | {" ": "\u3000"})
FW_AT = "@".translate(FW)
AR = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
ZW, NBSP = "\u200b", "\u00a0"


def found(text: str) -> list[tuple[str, str]]:
    return [(f.type, text[f.start : f.end]) for f in DETECTOR.find(text)]


EVASIONS = [
    # full-width digits and at-sign
    ("card", "4929 1737 4286 2308".translate(FW)),
    ("phone", "+44 20 7946 0555".translate(FW)),
    ("phone", "13698765432".translate(FW)),
    ("cn_id", "11010519491231002X".translate(FW)),
    ("email", f"liu.yang{FW_AT}example.com"),
    # cards: dots, slashes, mixed, no-break and zero-width spaces, a space between every digit, Arabic-Indic
    ("card", "4929.1737.4286.2308"),
    ("card", "4929/1737/4286/2308"),
    ("card", "4929-1737 4286.2308"),
    ("card", NBSP.join(["4929", "1737", "4286", "2308"])),
    ("card", ZW.join(["4929", "1737", "4286", "2308"])),
    ("card", " ".join("4929173742862308")),
    ("card", "4929 1737 4286 2308".translate(AR)),
    # emails: zero-width space, accents, IDN, Cyrillic look-alikes, [at] / (at) / at ... dot
    ("email", "li" + ZW + "u.yang@example.com"),
    ("email", "zoë.müller@exämple.de"),
    ("email", "user@例子.中国"),
    ("email", "ada@\u0435\u0445\u0430m\u0440l\u0435.com"),  # Cyrillic ie, ha, a, er in "example"
    ("email", "liu.yang[at]example.com"),
    ("email", "liu.yang (at) example (dot) com"),
    ("email", "liu.yang at example dot com"),
    # Chinese ids 6-4-4-4 or with dots, mobiles 3-3-5
    ("cn_id", "110105 1949 1231 002X"),
    ("cn_id", "110105.19491231.002X"),
    ("phone", "136 987 65432"),
    # IBANs lower-case or dashed, a lower-case AWS key, an SSN, passports
    ("iban", "gb29 nwbk 6016 1331 9268 19"),
    ("iban", "GB29-NWBK-6016-1331-9268-19"),
    ("secret", "akiaiosfodnn7example"),
    ("ssn", "123-45-6789"),
    ("passport", "E23456789"),
]


@pytest.mark.parametrize(("type_", "value"), EVASIONS, ids=[f"{t}:{v!r}" for t, v in EVASIONS])
def test_an_evasive_spelling_is_found_and_masked_in_the_original(type_: str, value: str) -> None:
    text = f"passport no. {value} ok" if type_ == "passport" else f"note: {value} ok"
    assert found(text) == [(type_, value)]
    assert MASK.redact(text).text == text.replace(value, f"[{type_.upper()}]")


@pytest.mark.parametrize(
    "text",
    [
        "Meet me at the station at 5 pm, look at example dot com later.",
        "Version 4.12.3 ships on 2024-06-01; the flat is ￥" + "1299".translate(FW) + ".",
        "Serial 123-45-6789 on the router label.",
        "Renew your passport before 2030.",
        "AsiaPacificRegionals and de44a7c09f1b2e3d4c5b6a7f8e9d0c1b",
        "Lot numbers 1234 5678 9012 3456 7890 are in stock.",
        "会议在３月１２日下午３点，第１２３４５６７８号文件。",
    ],
)
def test_look_alike_numbers_and_words_stay(text: str) -> None:
    assert found(text) == []


def test_ssn_without_dashes_needs_the_words() -> None:
    assert found("her SSN 536 22 8174 is on file") == [("ssn", "536 22 8174")]
    assert found("counted 536 22 8174 items") == []
    assert found("area 666-12-3456 or 900-12-3456 is never issued") == []


def test_pseudonyms_of_look_alikes_equal_the_plain_value() -> None:
    hasher = Redactor(DETECTOR, dict.fromkeys(PII_TYPES, "hash"), hash_key=b"test-key")
    plain = hasher.redact("card 4929 1737 4286 2308").text
    assert hasher.redact("card " + "4929 1737 4286 2308".translate(FW)).text == plain
    assert hasher.redact("card " + "4929 1737 4286 2308".translate(AR)).text == plain
    email = hasher.redact("mail liu.yang@example.com").text
    assert hasher.redact("mail liu.yang [at] example [dot] com").text == email
    assert hasher.redact("mail LIU.YANG at example dot com").text == email


def test_the_view_maps_back_to_whole_original_characters() -> None:
    text = "\uff41\u200bé①ﬁ"  # a full-width a, a zero-width space, é, a circled 1, the fi ligature
    view = normal_view(text)
    assert view.text == "ae1fi" and view.span(0, 2) == (0, 3) and view.span(3, 5) == (4, 5)
    assert normal_view("plain ascii, 中文").origin is None


def test_the_speaker_and_metadata_are_redacted_like_the_text() -> None:
    pii = Redaction(PIISettings()).for_tenant("t1")
    turn = pii.model(
        TurnIn(user="hello", speaker="jane.doe@example.com", metadata={"from": f"jane.doe{FW_AT}example.com"})
    )
    assert turn.speaker == "[EMAIL]" and turn.metadata == {"from": "[EMAIL]"}
    interaction = pii.model(InteractionIn(session_id="s", user="hi", speaker="+44 20 7946 0555"))
    assert interaction.speaker == "[PHONE]"
    assert pii.report() == {"email": 2, "phone": 1}


def test_the_evasion_corpus_meets_the_targets() -> None:
    scores = evaluate(DETECTOR, load_corpus(EVASION_CORPUS))
    overall = scores.overall.as_dict()
    assert overall["recall"] >= 0.95 and overall["precision"] >= 0.95, (scores.misses, scores.false_positives)
