"""`python -m benchmarks [ops] [--quick] [--out FILE] ...` (`--help` lists the options)."""

from benchmarks.cli import main

if __name__ == "__main__":
    main()
