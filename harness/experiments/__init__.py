"""Runs built from trials, and what is made of their records: calibration, selection, inference, reports.

calibration.py         the links of a run: literal, or similarity-scaled from calibration trials
measured_selection.py  Algorithm 1 decided from real trials on this cluster
infer.py               the paper's unstated setup, inferred from its observed runs
report.py              claims.md, claims.json and figures from a run's records and verdicts
compare.py             a run against a baseline: slowdowns and changed verdicts
rejudge.py             a run's records judged again, by today's claims
time_to_loss.py        beyond the paper: each technique's time and tokens to a target held-out loss
beyond.py              the five techniques timed to one target on every slice, and claims B1 and B2
"""
