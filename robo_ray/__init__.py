"""robo-ray: convert robot-learning datasets (LeRobot, ...) to RLDS at scale, on Ray."""
__version__ = "0.1.0"
