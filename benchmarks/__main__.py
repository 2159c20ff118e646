from .entry import bench

bench()
