"""GitHub integration: the REST client, the sticky PR comment, the check run and the job summary.

Everything that talks to GitHub sits behind :mod:`gpu_gate.github.client`. The ``report``
command calls :func:`gpu_gate.github.publish.publish`; nothing else here runs by itself.
"""
from __future__ import annotations
