"""The agent's own exceptions."""


class ConfigError(Exception):
    """Bad flags or a bad input file: the agent exits at start with this message."""
