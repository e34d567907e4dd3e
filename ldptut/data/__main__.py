"""``python -m ldptut.data NAME...``: make each data set available in the cache (``make data``)."""
from . import main

main()
