"""What was asked: the option table (options.py), the run configuration derived from it with its checks across
options (config.py), and the --model table."""
