"""ALOHA / ACT episode files: one HDF5 file per episode (/observations/{qpos, qvel, effort, images/<cam>}, /action)."""
