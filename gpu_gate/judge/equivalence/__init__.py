"""The equivalence engine: fuzzed cases, a float64 reference, a baseline-relative tolerance,
anti-exploit guards, error-growth sweeps and shrinking. Imports torch: the judge's process only."""
