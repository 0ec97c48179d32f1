"""PII detection and redaction: each rule type with positives and hard negatives, the checksums,
overlaps, the three actions, pseudonym stability, idempotence, nested values, and the labelled corpus."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import importlib.util
import itertools
import json
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from strata.config import PII_TYPES, PIISettings
from strata.privacy.pii import (
    Finding,
    MergedDetector,
    PresidioDetector,
    RuleDetector,
    cn_id_check_char,
    iban_valid,
    luhn_valid,
    make_detector,
    resolve,
)
from strata.privacy.redaction import Redacted, Redactor
from strata_bench import pii as bench_pii
from strata_bench.pii import DEFAULT_CORPUS, MIN_PRECISION, MIN_RECALL, RULE_TYPES, evaluate, load_corpus

DETECTOR = RuleDetector()
KEY = b"test-key"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
HAS_PRESIDIO = importlib.util.find_spec("presidio_analyzer") is not None


def found(text: str) -> list[tuple[str, str]]:
    return [(f.type, text[f.start : f.end]) for f in DETECTOR.find(text)]


def redactor(action: str = "mask", key: bytes = KEY, **overrides: str) -> Redactor:
    return Redactor(DETECTOR, {**{t: action for t in PII_TYPES}, **overrides}, hash_key=key)


POSITIVES = [
    # email
    ("email", "Write to {} about the outage.", "alice.smith@example.com"),
    ("email", "plus-addressing: {} works", "bob+newsletter@mail.example.org"),
    ("email", "uk domain {}.", "Carol.Jones@corp.example.co.uk"),
    ("email", "Name <{}>", "jane.doe@example.com"),
    ("email", "我的邮箱是{}，谢谢", "zhangwei@163.com"),
    ("email", "QQ邮箱{}", "13800138000@qq.com"),
    # phone
    ("phone", "Call {} tonight", "(415) 555-0132"),
    ("phone", "Call {} tonight", "415-555-0132"),
    ("phone", "Call {} tonight", "415.555.0132"),
    ("phone", "Call {} tonight", "+1 (212) 555-0187"),
    ("phone", "toll free {}", "1-800-555-0199"),
    ("phone", "London {}", "+44 20 7946 0958"),
    ("phone", "London {}", "+44 (0)20 7946 0958"),
    ("phone", "London {}", "020 7946 0958"),
    ("phone", "mobile {}", "07700 900123"),
    ("phone", "Paris {}", "06 12 34 56 78"),
    ("phone", "Munich {}", "089/1234567"),
    ("phone", "Tokyo {}", "+81 3-1234-5678"),
    ("phone", "tel:{}", "+14155550132"),
    ("phone", "手机{}随时联系", "13800138000"),
    ("phone", "手机：{}", "138 0013 8000"),
    ("phone", "电话{}。", "+86 139-1234-5678"),
    ("phone", "电话{}。", "8613712345678"),
    ("phone", "手机：{}，工作日", "(+86)138 0013 8000"),
    ("phone", "座机{}转人事", "010-62345678"),
    ("phone", "座机{}转人事", "0755-86001234"),
    ("phone", "客服热线{}", "400-820-8820"),
    # card
    ("card", "card {} on file", "4111 1111 1111 1111"),
    ("card", "card {} on file", "4111-1111-1111-1111"),
    ("card", "card {} on file", "5500000000000004"),
    ("card", "amex {}", "3782 822463 10005"),
    ("card", "mc 2-series {}", "2221 0000 0000 0009"),
    ("card", "discover {}", "6011111111111117"),
    ("card", "jcb {}", "3530 1113 3330 0000"),
    ("card", "卡号{}已绑定", "6250941006528599"),
    # cn_id
    ("cn_id", "身份证号{}，请核对", "11010519491231002X"),
    ("cn_id", "身份证号{}，请核对", "11010519491231002x"),
    ("cn_id", "ID: {}", "310104198511200021"),
    ("cn_id", "证件号 {}", "510107200002290037"),
    ("cn_id", "证件号 {}", "440305 19900101 123X"),
    # iban
    ("iban", "IBAN {} please", "DE89 3704 0044 0532 0130 00"),
    ("iban", "IBAN {} please", "DE89370400440532013000"),
    ("iban", "IBAN {}.", "GB82 WEST 1234 5698 7654 32"),
    ("iban", "IBAN {}.", "FR1420041010050500013M02606"),
    ("iban", "IBAN {}.", "ES91 2100 0418 4502 0005 1332"),
    ("iban", "IBAN {}.", "IT60 X054 2811 1010 0000 0123 456"),
    ("iban", "IBAN {}.", "NL91ABNA0417164300"),
    ("iban", "IBAN {}.", "CH93 0076 2011 6238 5295 7"),
    ("iban", "收款账户{}（比利时）", "BE68539007547034"),
    # ip
    ("ip", "from {} at noon", "192.168.1.10"),
    ("ip", "listen {}:8080", "10.0.0.1"),
    ("ip", "subnet {}/8", "10.0.0.0"),
    ("ip", "服务器{}端口8080", "172.16.5.4"),
    ("ip", "v6 {} up", "2001:db8::8a2e:370:7334"),
    ("ip", "v6 {}.", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"),
    ("ip", "link-local {}", "fe80::1"),
    ("ip", "mapped {}", "::ffff:192.0.2.128"),
    ("ip", "[{}]:443", "2001:db8::1"),
    # secret
    ("secret", "key {}", "sk-abc123DEF456ghi789JKL012mno345PQR678stu901VWX2"),
    ("secret", "key {}", "sk-proj-Ab3_cD4-eF5gH6iJ7kL8mN9oP0qR1sT2"),
    ("secret", "key {}", "sk-strata-9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
    ("secret", "aws {}", "AKIAIOSFODNN7EXAMPLE"),
    ("secret", "gh {}", "ghp_1234567890abcdefghijABCDEFGHIJ123456"),
    ("secret", "gh {}", "github_pat_11ABCDEFG0123456789abc_defGHIJKLmnopQRSTuvwxYZ0123456789abcdefghijKLMNOPQRstuv"),
    ("secret", "slack {}", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("secret", "google {}", "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
    ("secret", "stripe {}", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("secret", "stripe {}", "rk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("secret", "Bearer {}", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P"),
    ("secret", "password={}", "hunter2"),
    ("secret", "DB_PASSWORD={} # prod", "Tr0ub4dor&3"),
    ("secret", 'cfg {{"password": "{}"}}', "a b 12!"),
    ("secret", "api_key: {}", "3zhktylk1www6r6xqz8yxibrt653neih"),
    ("secret", "access_token={}&expires_in=3600", "Hwquj2QmTjHWAGL7JdkJ"),
    ("secret", "my password is {} now", "P@ssw0rd2024"),
    ("secret", "数据库密码：{}，别外传", "Xy7#pQ2z"),
    ("secret", "我的登录密码是{}", "zhang1990"),
    ("secret", "令牌为 {}", "abcdef987654"),
]


@pytest.mark.parametrize(("type_", "template", "value"), POSITIVES)
def test_rules_find_each_type(type_: str, template: str, value: str) -> None:
    assert found(template.format(value)) == [(type_, value)]


def test_private_key_block_is_one_secret() -> None:
    block = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAxyz+abc/def==\nAbCd0123\n-----END RSA PRIVATE KEY-----"
    assert found(f"deploy key:\n{block}\nthanks") == [("secret", block)]


NEGATIVES = [
    "Order #123456789 has shipped",
    "订单号 20240512001 已发货",
    "订单号：15800001111，请勿外传",
    "工单编号 13912345678 已关闭",
    "Invoice no. 4155550132 was issued",
    "deployed at 2024-05-12 10:30:00 UTC",
    "logged 20240512 and 20240512T103000Z",
    "dates 12.05.2024, 05/12/2024, 01-02-2024 08.30",
    "Release v1.2.3 and Python 3.10.12",
    "unix 1715500800 and 1715500800123 ms",
    "total $1,299.99 or ¥12,800.00",
    "ISBN 978-0-306-40615-7 and ISBN 0-306-40615-2",
    "Room 1203, port 5432, :8080",
    "tracking 1Z999AA10123456784, SF1234567890123",
    "USPS 9400 1000 0000 0000 0000 00",
    "uuid 550e8400-e29b-41d4-a716-446655440000",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "MAC 00:1A:2B:3C:4D:5E and 3c-22-fb-12-ab-9e and 05-05-22-10-37-DE",
    "alarm 12:30:45, ports 8080:80, 2024-05-12T10:30:00+08:00",
    "Account 0012-3456-7890 closed",
    "IMEI 356938035643809",
    "values 4907 9516 3982 8912 4333 in a row",
    # card-shaped, failing Luhn or without an issuer
    "card 4111 1111 1111 1112",
    "card 5500 0000 0000 0005",
    "number 1234 5678 9012 3452",
    "barcode 4006381333931",
    # ids: bad check digit, impossible or future birth date, unknown region
    "id 11010519491231002Y",
    "id 110105194912310021",
    "id 110101199913321234",
    "id 110101209901011235",
    "id 990101199003071235",
    # IBAN: bad check digits, wrong length for the country, a BIC
    "IBAN DE88 3704 0044 0532 0130 00",
    "IBAN DE8937040044053201300",
    "SWIFT DEUTDEFF",
    # ip-shaped
    "firmware version 10.0.0.1",
    "v1.2.3.4 and build 1.2.3.4.5",
    "OID 1.3.6.1.4.1.311",
    "256.300.1.1 is invalid",
    "std::vector and foo::bar",
    # secret-shaped
    "pip install scikit-learn==1.4.2",
    "Reset your password: click the link",
    "api_key: ${OPENAI_API_KEY}",
    "password=<your password here>",
    "password: ****** and token: null",
    "Token count: 1500, max_tokens=512, max_token=512",
    "-----BEGIN PUBLIC KEY----- and -----BEGIN CERTIFICATE-----",
    "the AKIA prefix, eyJ tokens, sk-learn",
    "请输入密码。密码错误，请重试。令牌已过期",
    # email-shaped
    "user@localhost, lodash@4.17.21, @app.route",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_hard_negatives_find_nothing(text: str) -> None:
    assert found(text) == []


def test_luhn() -> None:
    assert luhn_valid("4111111111111111") and luhn_valid("378282246310005")
    assert not luhn_valid("4111111111111112") and not luhn_valid("")


def test_cn_id_mod_11_2() -> None:
    assert cn_id_check_char("11010519491231002") == "X"
    assert cn_id_check_char("31010419851120002") == "1"


def test_iban_mod_97() -> None:
    assert iban_valid("GB82WEST12345698765432") and iban_valid("DE89370400440532013000")
    assert not iban_valid("GB83WEST12345698765432")


def test_iban_stops_at_the_country_length() -> None:
    assert found("IBAN DE89 3704 0044 0532 0130 00 EUR") == [("iban", "DE89 3704 0044 0532 0130 00")]
    assert found("DE89370400440532013000EUR") == []


def test_overlaps_longest_and_most_specific_win() -> None:
    # an IBAN's digits are not a phone or a card; an email's digits are not a phone
    assert found("GB82 WEST 1234 5698 7654 32") == [("iban", "GB82 WEST 1234 5698 7654 32")]
    assert found("13800138000@qq.com") == [("email", "13800138000@qq.com")]
    assert found("password=alice@example.com") == [("secret", "alice@example.com")]
    assert found("OPENAI_API_KEY=sk-abc123DEF456ghi789JKL012") == [("secret", "sk-abc123DEF456ghi789JKL012")]
    # same span: the more specific type wins
    assert resolve([Finding("phone", 0, 5), Finding("card", 0, 5)], "x" * 5) == [Finding("card", 0, 5)]
    assert resolve([Finding("phone", 2, 9), Finding("card", 0, 5)], "x" * 9) == [Finding("phone", 2, 9)]


def test_findings_are_sorted_and_disjoint() -> None:
    text = "a@b.com 13800138000 4111111111111111 10.0.0.1 password=hunter2 DE89370400440532013000"
    findings = DETECTOR.find(text)
    assert [f.type for f in findings] == ["email", "phone", "card", "ip", "secret", "iban"]
    assert all(a.end <= b.start for a, b in itertools.pairwise(findings))


def test_mask_hash_keep() -> None:
    text = "mail alice@example.com, call 415-555-0132, from 10.0.0.1"
    out = redactor("mask", phone="hash", ip="keep").redact(text)
    pseudonym = out.text.split("call ")[1].split(",")[0]
    assert out.text == f"mail [EMAIL], call {pseudonym}, from 10.0.0.1"
    assert pseudonym.startswith("[PHONE:") and len(pseudonym) == len("[PHONE:12345678]")
    assert out.counts == {"email": 1, "phone": 1}  # kept findings are not counted


def test_every_mask_label() -> None:
    text = "a@b.com 13800138000 4111111111111111 11010519491231002X DE89370400440532013000 10.0.0.1 " + AWS_KEY
    assert redactor().redact(text).text == "[EMAIL] [PHONE] [CARD] [CN_ID] [IBAN] [IP] [SECRET]"


def test_hash_is_hmac_of_the_normalized_value() -> None:
    expected = hmac.new(KEY, b"email:alice@example.com", hashlib.sha256).hexdigest()[:8]
    assert redactor("hash").redact("Alice@Example.COM").text == f"[EMAIL:{expected}]"


def test_hash_links_the_same_value_and_depends_on_the_key() -> None:
    r = redactor("hash")
    assert r.redact("alice@example.com").text == r.redact("ALICE@example.com").text
    assert r.redact("+86 138 0013 8000").text == r.redact("+86-13800138000").text
    assert r.redact("DE89 3704 0044 0532 0130 00").text == r.redact("DE89370400440532013000").text
    assert r.redact("bob@example.com").text != r.redact("alice@example.com").text
    assert redactor("hash", key=b"other").redact("alice@example.com").text != r.redact("alice@example.com").text
    assert Redactor(RuleDetector(), {"email": "hash"}, hash_key=KEY).redact("alice@example.com") == r.redact(
        "alice@example.com"
    )


@pytest.mark.parametrize("action", ["mask", "hash"])
def test_redaction_is_idempotent(action: str) -> None:
    r = redactor(action)
    for sentence in load_corpus(DEFAULT_CORPUS):
        once = r.redact(sentence.text)
        assert r.redact(once.text) == Redacted(once.text, {})


def test_placeholders_are_never_detected() -> None:
    assert DETECTOR.find("[EMAIL] [PHONE:12345678] [CARD:20240512] password=[SECRET] token=[SECRET:3f9a1c2e]") == []


def test_redact_value_nested_json_keeps_keys() -> None:
    Point = namedtuple("Point", "label n")
    value: Any = {
        "alice@example.com": "contact alice@example.com",
        "turns": [{"text": "call 13800138000", "n": 3}, ("ip 10.0.0.1", None)],
        "point": Point("a@b.com", 1.5),
        "flag": True,
    }
    out = redactor().redact_value(value)
    assert out == {
        "alice@example.com": "contact [EMAIL]",
        "turns": [{"text": "call [PHONE]", "n": 3}, ("ip [IP]", None)],
        "point": Point("[EMAIL]", 1.5),
        "flag": True,
    }
    assert isinstance(out["point"], Point) and value["turns"][0]["text"] == "call 13800138000"


def test_chinese_text() -> None:
    text = "客户张伟，邮箱zhangwei@163.com，手机138 0013 8000，身份证11010519491231002X，密码：Abc@2024。"
    assert redactor().redact(text) == Redacted(
        "客户张伟，邮箱[EMAIL]，手机[PHONE]，身份证[CN_ID]，密码：[SECRET]。",
        {"email": 1, "phone": 1, "cn_id": 1, "secret": 1},
    )


def test_policy_is_validated() -> None:
    with pytest.raises(ValueError, match="unknown PII action"):
        Redactor(DETECTOR, {"email": "drop"}, hash_key=KEY)
    with pytest.raises(ValueError, match="hash_key"):
        Redactor(DETECTOR, {"email": "hash"}, hash_key=b"")
    assert Redactor(DETECTOR, {}, hash_key=b"").redact("a@b.com").text == "[EMAIL]"  # missing type: masked


def test_tenant_policy_from_settings() -> None:
    settings = PIISettings(tenants={"acme": {"email": "keep"}})
    assert Redactor(DETECTOR, settings.policy_for("acme"), hash_key=KEY).redact("a@b.com").text == "a@b.com"
    assert Redactor(DETECTOR, settings.policy_for("other"), hash_key=KEY).redact("a@b.com").text == "[EMAIL]"


def test_make_detector_without_presidio_is_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(make_detector(PIISettings(ner=False)), RuleDetector)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert isinstance(make_detector(PIISettings(ner=True)), RuleDetector)


@pytest.mark.skipif(HAS_PRESIDIO, reason="presidio-analyzer is installed")
def test_presidio_detector_needs_presidio() -> None:
    with pytest.raises(ImportError, match="presidio-analyzer"):
        PresidioDetector()


class _Result:
    def __init__(self, entity_type: str, start: int, end: int, score: float) -> None:
        self.entity_type, self.start, self.end, self.score = entity_type, start, end, score


class _FakeAnalyzer:
    """Stands in for presidio's AnalyzerEngine, the SDK at the boundary."""

    def get_supported_entities(self, language: str) -> list[str]:
        return ["PERSON", "LOCATION", "EMAIL_ADDRESS"]

    def analyze(self, *, text: str, language: str, entities: list[str]) -> list[_Result]:
        assert entities == ["LOCATION", "PERSON"]
        spans = [("PERSON", "Jane Doe", 0.85),
                 ("LOCATION", "Berlin", 0.9), ("PERSON", "alice", 0.6), ("PERSON", "x", 0.1)]
        return [_Result(t, text.index(v), text.index(v) + len(v), s) for t, v, s in spans if v in text]


def test_presidio_names_and_places_merged_behind_the_rules() -> None:
    text = "Jane Doe in Berlin wrote from alice@example.com x"
    detector = MergedDetector(RuleDetector(), PresidioDetector(analyzer=_FakeAnalyzer()))
    assert [(f.type, text[f.start : f.end]) for f in detector.find(text)] == [
        ("person", "Jane Doe"),
        ("address", "Berlin"),
        ("email", "alice@example.com"),  # rules win over Presidio's "alice"; the 0.1 score is dropped
    ]
    assert redactor().redact(text).text == "Jane Doe in Berlin wrote from [EMAIL] x"  # rules alone: no names
    assert Redactor(detector, {}, hash_key=KEY).redact(text).text == "[PERSON] in [ADDRESS] wrote from [EMAIL] x"


def test_corpus_meets_the_targets_per_rule_type() -> None:
    corpus = load_corpus(DEFAULT_CORPUS)
    assert len(corpus) >= 320 and sum(1 for s in corpus if not s.labels) >= 100
    assert {s.lang for s in corpus} == {"en", "zh"}
    scores = evaluate(RuleDetector(), corpus)
    for t in RULE_TYPES:
        d = scores.types[t].as_dict()
        assert d["labelled"] >= 20, t
        assert d["recall"] >= MIN_RECALL and d["precision"] >= MIN_PRECISION, (t, d)


def test_bench_cli_writes_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_pii, "_THROUGHPUT_S", 0.01)
    monkeypatch.setattr(bench_pii, "_ADVERSARIAL_RUNS", 1)
    parser = argparse.ArgumentParser()
    bench_pii.add_arguments(parser)
    out = tmp_path / "pii.json"
    assert bench_pii.run(parser.parse_args(["--json", str(out)])) == 0
    report = json.loads(out.read_text())
    assert set(report) == {"types", "overall", "by_lang", "sentences_per_s", "adversarial_ms", "evasion"}
    assert set(report["adversarial_ms"]) == set(bench_pii.ADVERSARIAL)
    assert set(report["by_lang"]) == {"en", "zh"} and report["sentences_per_s"] > 0
    assert set(report["types"]["email"]) == {"labelled", "found", "tp", "precision", "recall"}


def test_corpus_labels_must_be_in_the_text(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "hi", "lang": "en", "entities": [{"type": "email", "value": "a@b.com"}]}))
    with pytest.raises(ValueError, match="not in the text"):
        load_corpus(bad)
