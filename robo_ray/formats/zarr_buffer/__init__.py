"""Zarr replay buffers (Diffusion Policy's ReplayBuffer, UMI's replay_buffer.zarr.zip): data/*, meta/episode_ends."""
