"""What crosses between the judge and its workers, and nothing that decides.

Framing (:mod:`.wire`), the typed messages and the tensors in them (:mod:`.messages`), the job as both
sides read it (:mod:`.jobs`), and the deterministic builders both sides compute from a case's
token: the case schedule (:mod:`.cases`), the inputs (:mod:`.inputs`), the guard bands
(:mod:`.guard`) and the rounding envelope (:mod:`.rounding`). Both the judge and the workers import
this package; it imports neither of them (``tests/test_fence.py``).
"""
