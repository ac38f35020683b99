"""The vLLM family: the engine's top-k / top-p logits processing, checked as a derived-``K`` sampling target."""
