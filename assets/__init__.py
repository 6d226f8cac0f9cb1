"""Scene files shipped with worldsim (MJCF); data, not code."""
