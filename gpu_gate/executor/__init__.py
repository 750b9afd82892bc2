"""Running a plan's jobs: each job a judge process and its sandboxed workers, spread over the GPUs.

The run (:mod:`.scheduling`) over the GPUs (:mod:`.slots`); one job (:mod:`.job`): the judged run of
code under review (:mod:`.judged`), one contained process tree (:mod:`.containment`) in its sandbox
(:mod:`.sandbox`, :mod:`.gpu_nodes`), with its command line and environment (:mod:`.argv`); the
results the gate writes when a job could not (:mod:`.results`); stopping a run (:mod:`.control`).
This is gpu-gate's own side: it never imports code under review.
"""
