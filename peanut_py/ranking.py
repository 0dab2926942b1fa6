"""Hit ranking (PEANUT section 3.4): duplicate removal, strata and hit-rank of a chunk's validated hits, and
the gathers the postprocessing builds on.  The work is done without the GIL by the private ``_ranking``."""
from ._ranking import expand, gather_read_strands, gather_segments, rank_hits, strata_counts

__all__ = ["expand", "gather_read_strands", "gather_segments", "rank_hits", "strata_counts"]
