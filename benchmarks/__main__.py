"""`python -m dsv41_jax.bench [ops] [--quick] [--out FILE] ...` (`--help` lists the options)."""

from dsv41_jax.bench.cli import main

if __name__ == "__main__":
    main()
