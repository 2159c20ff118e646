from benchmarks.entry import benchrun

benchrun()
