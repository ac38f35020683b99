"""How upstream code is loaded without its trainer: checkouts and revisions, the Megatron parallel-state
stand-in, and the packed-sequence conventions NeMo-RL and SkyRL share."""
