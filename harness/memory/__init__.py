"""Peak live tensor bytes, measured by a tracker of storage (real tensors, or fake tensors at the historic
scale): the logits-level and hidden-state measurements the budget checks and the bench use."""
