"""PII: detecting it in text (:mod:`~strata.privacy.pii`: rules, and Presidio when it
is installed) and redacting it by the tenant's policy, in every request body before any
layer writes it (:mod:`~strata.privacy.redaction`).
"""

from __future__ import annotations

from strata.privacy.pii import (
    Detector,
    Finding,
    MergedDetector,
    PresidioDetector,
    RuleDetector,
    make_detector,
)
from strata.privacy.redaction import Redaction, Redactor, TenantRedaction

__all__ = [
    "Detector",
    "Finding",
    "MergedDetector",
    "PresidioDetector",
    "Redaction",
    "Redactor",
    "RuleDetector",
    "TenantRedaction",
    "make_detector",
]
