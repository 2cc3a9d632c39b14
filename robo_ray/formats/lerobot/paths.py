"""What LeRobot's reader, writer and verifier agree on: the v3.0 dataset's file paths and lerobot's own index
columns."""
from __future__ import annotations

from typing import Any

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS = "meta/tasks.parquet"
# a dataset with no episode written gets one empty meta/episodes part (robo-ray's reader needs a file to list none)
EMPTY_EPISODES = "meta/episodes/chunk-000/file-000.parquet"
# lerobot's own index columns: step order, episode/global indices, task via language_instruction (not data)
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def file_rel(template: str, index: int, chunks_size: int, **fields: Any) -> str:
    """A unit's file path: `template` (DATA_PATH, VIDEO_PATH, EPISODES_PATH) at chunk index // chunks_size."""
    chunk, file = divmod(index, chunks_size)
    return template.format(chunk_index=chunk, file_index=file, **fields)
