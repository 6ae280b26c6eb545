"""The ground floor: plain data and protocols every other package stands on.

Nothing here imports from the rest of `app` (tests/test_layers.py enforces it): candidate and
evaluation types, the search space and its safe restriction parser, typed events and their
bus, the evaluator protocol and device info, and the units figures are shown in.
"""
