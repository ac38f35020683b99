"""What runs ON a rank for one Case against one target: the logits-level jobs (token, packed, policy,
ownership), the hidden-state job, the distributed bad-input job, and the tiny jobs of the pool's self-tests.
Jobs are plain functions the pool imports by their module and name inside each rank process."""
