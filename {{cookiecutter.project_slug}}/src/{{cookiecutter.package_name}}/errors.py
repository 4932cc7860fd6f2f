"""Errors a user can act on. The CLI prints their message without a traceback and exits non-zero."""


class DataError(ValueError):
    """The data source is missing, empty or holds something that is not a usable image."""


class ExportError(RuntimeError):
    """An exported model does not behave like the trained Keras model."""
