"""Episode datasets: the HDF5 layout, its writer and reader, and recording episodes from envs."""
