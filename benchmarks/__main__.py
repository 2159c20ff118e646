from .errors import bench

bench()
