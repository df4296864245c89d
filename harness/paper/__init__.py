"""The paper as data: what it observed, what it claims, what a backend declares it cannot show, Algorithm 1.

observed.py    the runs the paper reports as ran or failed
claims.py      each claim as a function of a table of trial records: a verdict with its comparisons
limits.py      declared limits: a mechanism the run measures, its threshold and bound
figures.py     how a figure prints beside the threshold or bound it was compared with
deviations.py  which limits each backend declares
selection.py   the paper's Algorithm 1: a technique for a slice
"""
