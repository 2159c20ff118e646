from benchmarks.errors import benchrun

benchrun()
