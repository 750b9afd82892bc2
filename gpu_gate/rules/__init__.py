"""The base decides the rules: what a change does to them is a finding, and the base's specs judge it.

- every difference between the base's policy and the head's, and between a spec at the base and the
  same spec at the head, becomes a finding with its direction; a weakening blocks unless the base's
  policy says `rule_changes: warn` (see ``change.py``);
- a spec that exists at the base is run from the base's source against the head's kernels: its jobs
  carry that source in ``options["base_spec"]`` and the workers load it instead of the head's file.
"""
