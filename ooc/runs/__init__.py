"""A run: its directory (:mod:`.rundir`), what its files record (:mod:`.records`), how its entries are
proven ooc's (:mod:`.proof`, registered with :mod:`ooc.owned` here, whatever module of the package is
imported first) and its paged duals (:mod:`.duals`)."""

from . import proof  # noqa: F401
