"""One package per dataset format (reader, writer, and the codec they share); registries live in
robo_ray.readers and robo_ray.writers."""
