"""The lerobot format: what reading and writing it share, one package."""
