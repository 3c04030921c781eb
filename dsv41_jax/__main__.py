"""`python -m dsv41_jax info [--batch B --context N]`: what this machine runs (dsv41_jax.info)."""

import sys

from dsv41_jax import info

if __name__ == "__main__":
    if sys.argv[1:2] != ["info"]:
        raise SystemExit("usage: python -m dsv41_jax info [--batch B] [--context N]")
    info.main(sys.argv[2:])
