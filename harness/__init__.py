"""The shared harness of the suite: model, data, training, techniques, emulated slices, claims.

`python -m harness --help` lists the commands.
"""
__version__ = "0.1.0"
