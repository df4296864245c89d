"""A run's trials and what they leave: the runner's books, the jobs sent to workers, the records.

run_config.py   RunConfig: one run's settings, one default each, a TOML file under the options
trials.py       Trial and Runner: a sweep of trials on a cluster (harness.backends.contract), timed step by step
jobs.py         a training job as plain data, sent to worker processes
records.py      the trial record (record.schema.json): built, validated, appended
noise.py        how far a step time moves by itself: the band a difference must clear
environment.py  what a result was measured on: interpreter, packages, devices, host
"""
