"""The one error type users see: a mistake in their input, named by field."""


class FlnetError(Exception):
    """A problem with the user's input or environment, shown without a traceback.

    `field` is the dotted path of the offending scenario field when there is one.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class ScenarioError(FlnetError):
    """The scenario file is malformed or inconsistent."""


class DataError(FlnetError):
    """A data set is missing or unreadable."""


class UnitWarning(UserWarning):
    """A value far outside the plausible range of its unit (probably a unit slip)."""


class TopologyWarning(UserWarning):
    """A mixing matrix lacks a property an algorithm's analysis assumes (the run goes on)."""
