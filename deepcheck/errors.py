"""Exceptions DeepCheck raises; each message says what happened and what to do about it."""

from __future__ import annotations


class DeepCheckError(Exception):
    """Base class of every error DeepCheck raises on purpose."""


class ConfigError(DeepCheckError, ValueError):
    """Bad arguments to `init()` or an unusable MPI set-up."""


class StateError(DeepCheckError, TypeError):
    """The state handed to `save()` holds something DeepCheck cannot restore exactly."""


class CorruptCheckpointError(DeepCheckError):
    """A shard or manifest failed its size or checksum check."""


class CheckpointTimeout(DeepCheckError, TimeoutError):
    """A wait for a checkpoint level (or for shutdown) ran past its timeout."""
