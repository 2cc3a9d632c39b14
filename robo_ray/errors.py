"""Error tree with stable codes and the exit code each maps to.

Exit codes (DESIGN §9): 0 ok; 1 other; 2 usage/config; 3 validation failed or quarantine over threshold;
4 conflict with an existing output.
"""
from __future__ import annotations


class RoboRayError(Exception):
    """Base error: `code` is stable (documented, grep-able), `exit_code` is what the CLI returns."""

    code: str = "RR000"
    exit_code: int = 1

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    def line(self) -> str:
        """One line for stderr."""
        return f"error[{self.code}]: {self}"


class UsageError(RoboRayError):
    """Bad CLI input or configuration (exit 2)."""

    code = "RR200"
    exit_code = 2


class SourceNotFound(UsageError):
    code = "RR201"


class UnknownFormat(UsageError):
    code = "RR202"


class DestinationNotEmpty(UsageError):
    code = "RR203"


class ConfigError(UsageError):
    code = "RR204"


class LocalDestinationOnCluster(UsageError):
    """A local destination on a multi-node cluster: each node would write its shards to its own disk."""

    code = "RR205"


class SourceFormatError(RoboRayError):
    """The dataset's metadata is unreadable or inconsistent beyond repair (exit 2)."""

    code = "RR300"
    exit_code = 2


class UnsafeInput(SourceFormatError):
    """Untrusted metadata tried to escape the dataset root, or exceeds a size/shape limit."""

    code = "RR301"


class ValidationFailed(RoboRayError):
    """Validate found a problem, or quarantine exceeded the threshold (exit 3)."""

    code = "RR500"
    exit_code = 3


class OutputConflict(RoboRayError):
    """Another run owns or already published the destination (exit 4)."""

    code = "RR400"
    exit_code = 4


class EpisodeError(RoboRayError):
    """One episode cannot be converted; it is quarantined, the run goes on."""

    code = "EP000"


class VideoMissing(EpisodeError):
    code = "EP101"


class VideoDecodeError(EpisodeError):
    code = "EP102"


class FrameCountMismatch(EpisodeError):
    code = "EP103"


class TimestampMismatch(EpisodeError):
    code = "EP104"


class DataMissing(EpisodeError):
    code = "EP201"


class DataCorrupt(EpisodeError):
    code = "EP202"


class NonFiniteValue(EpisodeError):
    code = "EP203"


class ImageDecodeError(EpisodeError):
    code = "EP204"


class StorageError(RoboRayError):
    """A storage operation failed for good (after the transport's retries); the message names the URL (exit 1).

    Not an episode problem: the unit that hit it fails (and is retried by the executor), the run reports it."""

    code = "RR600"
    exit_code = 1


class BucketNotFound(StorageError):
    """The bucket of an s3:// or gs:// URL does not exist (exit 2: fix the URL)."""

    code = "RR601"
    exit_code = 2


class StorageUnreachable(StorageError):
    """The storage endpoint did not answer (connection refused, DNS, timeout) within the retry budget."""

    code = "RR602"


class StorageAccessDenied(StorageError):
    """The credentials were refused or lack a permission (exit 2: fix the credentials or the policy)."""

    code = "RR603"
    exit_code = 2


class EpisodeTooLarge(EpisodeError):
    """One episode's arrays exceed the size/shape limits (robo_ray.safety), checked from the source's own headers
    before anything is read: the episode is quarantined, the run goes on."""

    code = "EP206"


class EpisodeTimedOut(EpisodeError):
    """A read or decode made no progress within `convert.read_timeout_s`, or the unit ran past
    `convert.unit_timeout_s`: the worker was replaced (an in-process thread abandoned, a Ray actor killed; see
    robo_ray/watchdog.py). Quarantined; `--resume` retries the unit."""

    code = "EP902"


class EpisodeDataOutside(EpisodeError):
    """One episode's data lives outside its file (an HDF5 virtual dataset, external storage): refused before
    anything is read, the episode is quarantined, the run goes on. (Links out of the file refuse the whole run,
    RR301: they are found when the file is opened.)"""

    code = "EP207"


class DatasetColumns(UsageError):
    """A Ray Dataset given to `robo_ray.data.write` lacks a column the target needs, or its sources do not share
    the features (canonical name and role) the target is planned from: one line naming the column / feature."""

    code = "RR206"


class RowUnreadable(EpisodeError):
    """One row of a Ray Dataset cannot be turned into an episode (a value of the wrong type or length, edited by
    the user's map): the episode is quarantined with the reason, the rest is written."""

    code = "EP209"
