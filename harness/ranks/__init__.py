"""Stage 2, running a Case: the persistent pool of gloo rank processes, their process groups and device,
the collective trace, job deadlines, and what a failed, crashed or hung rank becomes (RankError, RankHang)."""
