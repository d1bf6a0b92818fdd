"""The one error type of the topologies package."""


class TopologyError(ValueError):
    """A topology could not be built, loaded or queried (bad file, bad spec, too large...)."""
