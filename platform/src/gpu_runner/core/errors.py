"""Errors with a message a user can act on; the CLI prints them without a traceback and exits non-zero."""


class RunnerError(RuntimeError):
    """Base class: something the operator must fix (the message says what)."""


class SettingsError(RunnerError):
    """A setting (config file, flag or environment variable) is missing or invalid."""


class CapacityError(RunnerError):
    """Every instance type x subnet x market pool was out of capacity."""


class LaunchBlockedError(RunnerError):
    """EC2 refused the launch for a reason retrying elsewhere cannot fix (quota, permission, bad parameter)."""


class RegistrationTimeout(RunnerError):
    """The runner did not come online within the wait timeout."""
