"""Episode data: MCAP ROS 2 bags (mcap_io) and training datasets."""
