"""The worker side: the processes that import and run code under review.

A worker runs in a sandbox (see :mod:`gpu_gate.executor.sandbox`), imports the spec module and the kernels it
imports, and answers the judge's requests over one socket: run the candidate on these inputs, or
compute the reference on this case. Its answers are typed records of data (see
:mod:`gpu_gate.protocol.messages`). Nothing in this package compares, decides or writes a result: the
judge (:mod:`gpu_gate.judge`) does, in a process that never imports the code under test.
"""
