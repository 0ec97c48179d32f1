"""PII: detecting it in text (:mod:`~strata.privacy.pii`: rules, and Presidio when it
is installed) and redacting every request body by the tenant's policy before any
layer writes it (:mod:`~strata.privacy.redaction`).
"""

from __future__ import annotations

from strata.privacy.pii import (
    Detector,
    Finding,
    MergedDetector,
    PresidioDetector,
    Redactor,
    RuleDetector,
    make_detector,
)
from strata.privacy.redaction import Redaction, TenantRedaction

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
