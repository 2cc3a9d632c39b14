"""robomimic-family HDF5 sources: robomimic, LIBERO, MimicGen, Isaac Lab (one file, data/demo_N groups)."""
