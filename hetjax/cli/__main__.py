"""`python -m hetjax.cli ...`: the same as the `hetjax` console script."""

from hetjax.cli import main

main()
