"""Stand-in for SkyRL's model utilities WITH the two historic bugs (docs/bugs.md #2 and #3), written here.

* ``ChunkedDistributedLogprob.backward`` builds ``one_hot(target, V_local)``
  (int64) per chunk to place the chosen token's gradient: bug 3, and the
  same in the fused LM-head ``FusedLinearChunkedDistributedLogprob`` (the
  hidden-state path, ``harness/targets/skyrl/family.py``);
* the entropy backward subtracts from the logits it saved and adds the
  amount back ("borrow then restore"): bug 2.

The harness's regressions must fail on this module through the SkyRL adapter.
Everything else is as in ``skyrl_fixed``, which they must pass.
"""

import megatron.core.parallel_state as mpu
import torch
import torch.distributed as dist


def _log_softmax_over_shards(logits, group):
    row_max = logits.amax(-1, keepdim=True)
    dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - row_max
    sum_exp = shifted.exp().sum(-1, keepdim=True)
    dist.all_reduce(sum_exp, group=group)
    return shifted - sum_exp.log()


def _mask(target, vocab_start_index, vocab_end_index, vocab_local):
    outside = (target < vocab_start_index) | (target >= vocab_end_index)
    return outside, (target - vocab_start_index).clamp(0, vocab_local - 1)


class DistributedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vocab_parallel_logits, target, vocab_start_index, vocab_end_index, group, inference_only=False):
        return ChunkedDistributedLogprob.forward(
            ctx,
            vocab_parallel_logits,
            target,
            vocab_start_index,
            vocab_end_index,
            vocab_parallel_logits.shape[1],
            group,
        )

    @staticmethod
    def backward(ctx, grad_output):
        return ChunkedDistributedLogprob.backward(ctx, grad_output)[:4] + (None, None)


class ChunkedDistributedLogprob(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        vocab_parallel_logits,
        target,
        vocab_start_index,
        vocab_end_index,
        chunk_size,
        tp_group,
        inference_only=False,
    ):
        outside, local = _mask(target, vocab_start_index, vocab_end_index, vocab_parallel_logits.shape[-1])
        log_p = _log_softmax_over_shards(vocab_parallel_logits.float(), tp_group)
        picked = log_p.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=tp_group)
        ctx.save_for_backward(vocab_parallel_logits, outside, local)
        ctx.chunk_size, ctx.group = chunk_size, tp_group
        return picked

    @staticmethod
    def backward(ctx, grad_output):
        logits, outside, local = ctx.saved_tensors
        pieces = []
        for start in range(0, logits.shape[1], ctx.chunk_size):
            end = start + ctx.chunk_size
            softmax = _log_softmax_over_shards(logits[:, start:end].float(), ctx.group).exp()
            one_hot = torch.nn.functional.one_hot(local[:, start:end], num_classes=logits.shape[-1])
            chosen = (~outside[:, start:end]).unsqueeze(-1) * one_hot
            pieces.append((chosen.float() - softmax) * grad_output[:, start:end].unsqueeze(-1))
        return torch.cat(pieces, dim=1), None, None, None, None, None, None


class FusedLinearChunkedDistributedLogprob(torch.autograd.Function):
    """The fused LM-head signature with bug 3's backward: ``one_hot(target, V_local)`` per chunk of rows."""

    @staticmethod
    def forward(
        ctx, hidden, weight, target, vocab_start_index, vocab_end_index, chunk_size, tp_group, inference_only=False
    ):
        outside, local = _mask(target, vocab_start_index, vocab_end_index, weight.shape[0])
        pieces = []
        for start in range(0, hidden.shape[1], chunk_size):
            logits = (hidden[:, start : start + chunk_size] @ weight.t()).float()
            log_p = _log_softmax_over_shards(logits, tp_group)
            pieces.append(log_p.gather(-1, local[:, start : start + chunk_size].unsqueeze(-1)).squeeze(-1))
        picked = torch.cat(pieces, dim=1).masked_fill(outside, 0.0)
        dist.all_reduce(picked, group=tp_group)
        ctx.save_for_backward(hidden, weight, outside, local)
        ctx.chunk_size, ctx.group = chunk_size, tp_group
        return picked

    @staticmethod
    def backward(ctx, grad_output):
        hidden, weight, outside, local = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for start in range(0, hidden.shape[1], ctx.chunk_size):
            end = start + ctx.chunk_size
            h_chunk = hidden[:, start:end]
            softmax = _log_softmax_over_shards((h_chunk @ weight.t()).float(), ctx.group).exp()
            one_hot = torch.nn.functional.one_hot(local[:, start:end], num_classes=weight.shape[0])
            chosen = (~outside[:, start:end]).unsqueeze(-1) * one_hot
            grad_logits = (chosen.float() - softmax) * grad_output[:, start:end].unsqueeze(-1)
            grad_hidden[:, start:end] = (grad_logits @ weight.float()).to(hidden.dtype)
            grad_weight += grad_logits.flatten(0, 1).t() @ h_chunk.flatten(0, 1).float()
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None, None, None


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        group = mpu.get_tensor_model_parallel_group()
        softmax = _log_softmax_over_shards(logits, group).exp()
        mean_logit = (softmax * logits).sum(-1, keepdim=True)
        dist.all_reduce(mean_logit, group=group)
        entropy = -(softmax * _log_softmax_over_shards(logits, group)).sum(-1)
        dist.all_reduce(entropy, group=group)
        ctx.save_for_backward(logits, softmax, mean_logit)
        return entropy

    @staticmethod
    def backward(ctx, grad_output):
        logits, softmax, mean_logit = ctx.saved_tensors
        logits.sub_(mean_logit)
        grad = softmax * logits * grad_output.unsqueeze(-1)
        logits.add_(mean_logit)
        return -grad


def vocab_parallel_entropy(vocab_parallel_logits):
    return _Entropy.apply(vocab_parallel_logits)
