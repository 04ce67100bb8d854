"""Command modules: each parses its arguments and calls one function."""
