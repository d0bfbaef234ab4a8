"""ooc's safety promises as a stateful property (tests/safety_machine.py): random ooc commands, SIGKILLed
children and users' actions interleaved; after every step no user file is lost or changed, nothing is left
behind, and every artifact verifies or is refused in one line. A small budget here; the long run is
``scripts/stateful_safety.py``."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from safety_machine import SafetyMachine


def test_ooc_never_touches_what_it_did_not_make(tmp_path):
    SafetyMachine.base = str(tmp_path)
    SafetyMachine.steps = 0
    run = settings(max_examples=int(os.environ.get("OOC_SAFETY_EXAMPLES", "4")),
                   stateful_step_count=int(os.environ.get("OOC_SAFETY_STEPS", "10")), deadline=None,
                   derandomize=True, suppress_health_check=list(HealthCheck))(SafetyMachine).TestCase
    run().runTest()
    assert SafetyMachine.steps > 0
