"""The one error the RLDS read side raises on malformed bytes."""
from __future__ import annotations


class CorruptRecord(ValueError):
    """A TFRecord frame or a serialized tf.train.Example is malformed; the message says what and at which byte.

    A ValueError, so callers that already catch ValueError (Validate: "shard X is corrupt") keep working."""
