"""``gpu-gate audit``: benchmark submissions judged by the same engine as a pull request.

A problem set is trusted (it plays the base branch); every submission is untrusted (it plays the
pull request). Each submission is gated as a change to a small repository whose base holds the
problem, a gate spec written from it, and the problem's own ``Model`` in the submission's place.

- ``probe``: runs a problem (trusted code, its own process) to learn its inputs and which sizes
  may change, and how.
- ``kernelbench``: the KernelBench format, problem to spec.
- ``table``: the audit's table as Markdown, JSON and JUnit.
"""
