"""`RowsReader`: the rows of a Ray Dataset as a source, for the Convert and Validate stages' own code. It serves
`load_episode(ref)` from the row of `ref`'s episode (`rows.row_episode`: the Episode the original reader would
have loaded), so the converter, the writer's per-unit check and the sampled comparison run unchanged; what they
compare against is the row (after the user's maps), which `format_name` says in the reports."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from robo_ray.data.rows import row_episode
from robo_ray.data.spec import EPISODE, METADATA, SOURCE
from robo_ray.episode import Episode, EpisodeRef, FeatureSpec
from robo_ray.errors import RowUnreadable
from robo_ray.mapping import Mapping

ROWS_FORMAT = "ray-dataset-rows"  # what the reports name as the source the output was compared with
MIXED_METADATA = {"source": "text", "source_episode": "int"}  # added to each episode of several sources


class RowsReader:
    """A `Reader` over rows (see the module docstring): `fetch(episode_index)` gives the row of an episode (a
    write task's own rows, or on the driver a row fetched from the object store); `mapping` is the source's
    default mapping (row columns -> source keys); `mixed`: the dataset has several sources, so each episode's
    metadata also names its source and its index there, and `episode_id` is the output's index."""

    format_name = ROWS_FORMAT

    def __init__(self, features: dict[str, FeatureSpec], fps: float, mapping: Mapping,
                 fetch: Callable[[int], dict[str, Any]], mixed: bool = False, compared_with: str = "") -> None:
        self.features = features
        self.compared_with = compared_with or "the rows of a Ray Dataset"  # what Validate names as the source
        self.fps = fps
        self.mapping = mapping
        self.fetch = fetch
        self.mixed = mixed
        self.fs = None

    def prepare(self, refs: Sequence[EpisodeRef]) -> None:
        """Nothing to read ahead: the rows are in memory or in the object store."""

    def load_episode(self, ref: EpisodeRef) -> Episode:
        row = self.fetch(ref.episode_index)
        try:
            metadata = json.loads(row.get(METADATA) or "{}")
        except ValueError:
            raise RowUnreadable(f"episode {ref.episode_index}: column {METADATA!r} is not JSON") from None
        if not isinstance(metadata, dict):
            raise RowUnreadable(f"episode {ref.episode_index}: column {METADATA!r} is not a JSON object")
        if self.mixed:
            metadata.update(episode_id=ref.episode_index, source=str(row.get(SOURCE)),
                            source_episode=int(row.get(EPISODE)))
        return row_episode(row, ref, self.mapping, metadata)

    def close(self) -> None:
        """Nothing open."""
