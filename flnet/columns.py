"""Column names of a sweep's `points.csv` that its writer (`flnet.sweeps`) and its readers
(`flnet.plot`) share. Imports nothing: `flnet.plot` reads results without loading the scenario
schema (pydantic), torch or SimPy."""

# a run's summary.json fields that a point's row copies
SUMMARY_COLUMNS = (
    "status",
    "stop_reason",
    "diverged_round",  # studies show "diverged at round r" (flnet.analysis.ended_as)
    "diverged_by",  # the rule of run.divergence that fired (flnet.divergence)
    "rounds",
    "final_test_accuracy",
    "sim_time_s",
    "energy_j",
    "wall_s",
)
# which point's training a point replayed, and why it ran in full (flnet.reuse)
REUSE_COLUMNS = ("reused_from", "reuse_note")
# a point's outcome, not a swept field
POINT_OUTCOMES = frozenset({"point", *SUMMARY_COLUMNS, "error", "note", *REUSE_COLUMNS})
