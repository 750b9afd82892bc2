"""One module per ``gpu-gate`` verb. :mod:`gpu_gate.cli` parses the command line and hands the
arguments to the verb's module here, which acts."""
