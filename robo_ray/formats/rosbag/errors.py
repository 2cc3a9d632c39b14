"""The episode errors only bags raise (stable codes, quarantined like every EpisodeError)."""
from __future__ import annotations

from robo_ray.errors import EpisodeError


class GapBeyondSkew(EpisodeError):
    """At some step a mapped topic's latest message is older than the maximum skew (`on_gap: quarantine`)."""

    code = "EP210"


class TimeGoesBack(EpisodeError):
    """A topic's timestamps decrease in the bag's order (header stamps out of order, a clock reset)."""

    code = "EP211"
