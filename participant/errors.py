"""Errors the participant library raises before anything is sent."""


class SpecError(ValueError):
    """A collection spec is malformed; the message names the offending field."""


class RecordError(ValueError):
    """A person's record does not fit the collection spec; ``field`` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
