"""The judge side: the process that decides.

The judge builds each case's inputs, hands them to the workers (:mod:`gpu_gate.worker`) as data,
reads their answers back as plain tensors, compares, shrinks and writes the job's result. It never
imports the spec module or the code under test; what it knows of the spec (dims, inputs, tolerance)
comes from the reference worker's description, which imports the spec with the repository's own
modules replaced by inert stand-ins (see :mod:`gpu_gate.worker.stubs`).
"""
