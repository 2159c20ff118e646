from benchmarks.errors import main_entry


def _load():
    from .cli import main

    return main


main_entry("benchrun", _load)
