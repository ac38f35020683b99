"""Stand-in ``LigerVocabParallelCEFunction``: Liger's signature ([S, B, V_local], its own tp_group), in torch."""

import torch
import torch.distributed as dist


class LigerVocabParallelCEFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, tp_group, ignore_index, label_smoothing, formula, mode):
        distributed = tp_group is not None and tp_group.size() > 1
        rank = dist.get_rank(tp_group) if distributed else 0
        x = logits.float()
        top = x.amax(-1)
        if distributed:
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=tp_group)
        e = (x - top.unsqueeze(-1)).exp()
        local = target - rank * x.shape[-1]
        owned = (local >= 0) & (local < x.shape[-1])
        picked = (x - top.unsqueeze(-1)).gather(-1, local.clamp(0, x.shape[-1] - 1).unsqueeze(-1)).squeeze(-1) * owned
        total = e.sum(-1)
        if distributed:
            dist.all_reduce(picked, group=tp_group)
            dist.all_reduce(total, group=tp_group)
        ctx.save_for_backward(e / total.unsqueeze(-1), local, owned)
        return total.log() - picked

    @staticmethod
    def backward(ctx, grad):
        p, local, owned = ctx.saved_tensors
        onehot = torch.zeros_like(p).scatter_(-1, local.clamp(0, p.shape[-1] - 1).unsqueeze(-1), 1.0)
        return (p - onehot * owned.unsqueeze(-1)) * grad.unsqueeze(-1), None, None, None, None, None, None
