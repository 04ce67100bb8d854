"""Pure parsers of external tools' output (perftest, fio): text in, typed values out.

Each has golden files under ``tests/suite/micro/golden/``: captured output and the parsed value.
"""


class ParseError(ValueError):
    """The tool's output does not contain what the parser looks for; the message says what was seen."""
