"""Stand-in (tests only): verl's torch fused LM-head Function signature, plain autograd per chunk."""

import torch


class FusedLinearForPPOFunction:
    @staticmethod
    def apply(hidden_states, vocab_weights, input_ids, temperature=1.0, chunk_size=512):
        log_probs, entropy = [], []
        for start in range(0, hidden_states.shape[0], chunk_size):
            logits = (hidden_states[start : start + chunk_size] @ vocab_weights.t()).float() / temperature
            log_p = logits.log_softmax(dim=-1)
            log_probs.append(log_p.gather(-1, input_ids[start : start + chunk_size, None]).squeeze(-1))
            entropy.append(-(log_p.exp() * log_p).sum(dim=-1).to(hidden_states.dtype))
        if not log_probs:
            empty = hidden_states.new_zeros((0,))
            return empty.float(), empty
        return torch.cat(log_probs), torch.cat(entropy)


class FusedLinearForPPO(torch.nn.Module):
    """verl's module signature: ``chunk_size`` at construction, the Function applied in ``forward``."""

    def __init__(self, chunk_size=512):
        super().__init__()
        self.chunk_size = chunk_size

    def forward(self, hidden_states, vocab_weights, input_ids, temperature=1.0):
        return FusedLinearForPPOFunction.apply(
            hidden_states, vocab_weights, input_ids.to(torch.int64), temperature, self.chunk_size
        )
