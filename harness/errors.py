"""The one exception the suite raises for bad input.

Anything a user can get wrong (a model name, a path, a size) is checked before compiling or
training and reported as a BadInput whose message is one line naming the thing and what was
expected. The CLI prints it as `harness: error: <message>` and exits with status 2.
"""


class BadInput(ValueError):
    pass
