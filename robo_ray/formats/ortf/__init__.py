"""The ortf format: what reading and writing it share, one package."""
