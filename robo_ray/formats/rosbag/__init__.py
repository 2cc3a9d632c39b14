"""ROS bags (MCAP, rosbag2 SQLite3 / MCAP, ROS 1) as a source: one bag per episode, steps from a documented clock."""
