"""Redaction of request models before they are written: which fields, which policy."""

from __future__ import annotations

import pytest

from strata.config import PIISettings
from strata.privacy.redaction import Redaction
from strata.schema import (
    DocumentIn,
    InteractionIn,
    OutcomeIn,
    SkillExtractIn,
    SkillPatch,
    TraceStepIn,
    TurnIn,
    WorkingItemsIn,
)

EMAIL = "li.wei@example.com"


def test_every_content_field_is_redacted_and_labels_are_not() -> None:
    # ner off: with Presidio the speaker "Li Wei" is a name, redacted like the text
    pii = Redaction(PIISettings(ner=False)).for_tenant("t1")
    turn = pii.model(TurnIn(user=f"mail {EMAIL}", agent="ok", speaker="Li Wei", turn_id="t-1",
                            metadata={"contact": EMAIL, "n": 3, "tags": [EMAIL]}))
    assert turn.user == "mail [EMAIL]" and turn.speaker == "Li Wei" and turn.turn_id == "t-1"
    assert turn.metadata == {"contact": "[EMAIL]", "n": 3, "tags": ["[EMAIL]"]}
    # Bodies with nested steps and items are validated as the API receives them: from JSON-like dicts.
    items = pii.model(
        WorkingItemsIn.model_validate(
            {"items": [{"role": "user", "content": f"I am {EMAIL}"}], "task": f"write {EMAIL}"}
        )
    )
    assert items.items[0].content == "I am [EMAIL]" and items.task == "write [EMAIL]"
    doc = pii.model(DocumentIn(text=f"# Team\n\n{EMAIL}", title=f"Contact {EMAIL}", doc_id="d1"))
    assert EMAIL not in doc.text + (doc.title or "") and doc.doc_id == "d1"
    skill = pii.model(
        SkillExtractIn.model_validate(
            {"task": "notify", "trace": [f"mail {EMAIL}", {"tool": "send", "args": {"to": EMAIL}}]}
        )
    )
    step = skill.trace[1]
    assert skill.trace[0] == "mail [EMAIL]" and isinstance(step, TraceStepIn) and step.args == {"to": "[EMAIL]"}
    interaction = pii.model(
        InteractionIn.model_validate(
            {"session_id": "s", "user": f"{EMAIL} here", "trace": [{"command": f"mail {EMAIL}"}]}
        )
    )
    assert interaction.user == "[EMAIL] here" and interaction.trace is not None
    step = interaction.trace[0]
    assert isinstance(step, TraceStepIn) and step.command == "mail [EMAIL]"
    assert pii.model(OutcomeIn(success=True, notes=EMAIL)).notes == "[EMAIL]"
    assert pii.report()["email"] == 12  # every one of the twelve above


def test_an_unset_patch_field_stays_unset() -> None:
    pii = Redaction(PIISettings()).for_tenant("t1")
    patch = pii.model(SkillPatch(steps=[f"mail {EMAIL}"]))
    assert patch.model_dump(exclude_unset=True) == {"steps": ["mail [EMAIL]"]}


def test_tenant_policy_hash_links_and_keep_keeps() -> None:
    settings = PIISettings(hash_key="k1", tenants={"linked": {"email": "hash"}, "raw": {"email": "keep"}})
    redaction = Redaction(settings)
    a = redaction.for_tenant("linked").text(f"to {EMAIL}")
    b = redaction.for_tenant("linked").text(f"to {EMAIL.upper()}")
    assert a == b and a.startswith("to [EMAIL:") and EMAIL not in a
    assert redaction.for_tenant("raw").text(f"to {EMAIL}") == f"to {EMAIL}"
    assert redaction.for_tenant("other").text(f"to {EMAIL}") == "to [EMAIL]"


def test_hashing_without_a_key_is_refused_and_disabled_redacts_nothing() -> None:
    with pytest.raises(ValueError, match="hash_key"):
        Redaction(PIISettings(policy={"email": "hash"}))
    off = Redaction(PIISettings(enabled=False)).for_tenant("t1")
    assert off.text(EMAIL) == EMAIL and off.report() == {}
