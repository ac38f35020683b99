"""The ms-swift family: its Megatron GRPO vocab-parallel log-prob/entropy as a token target."""
