"""Stand-in (tests only): verl's padding helpers in their form from #3600 to #5115 (2025-10..2026-02).

The trainer's left-right padded batch becomes the no-padding form, which keeps
where each token sat in the left-right layout (flat ``indices``) and the
layout's widths; ppo_loss puts the engine's output back there and slices the
response columns from the right. flash-attn's helpers are imported where they
are called, as verl's attention_utils does (on a CPU the harness provides
them). ``SHIFT`` is what a defective tree changes: the output at position ``p``
holds token ``p + 1``, so the responses' columns end one before the last.
"""

import torch
from tensordict.tensorclass import NonTensorData

SHIFT = 1


def left_right_2_no_padding(data):
    from flash_attn.bert_padding import unpad_input

    input_ids, mask = data.pop("input_ids"), data.pop("attention_mask")
    data["max_seq_len"] = NonTensorData(input_ids.shape[1])
    data["max_response_len"] = NonTensorData(data["response_mask"].shape[1])
    ids, indices, offsets, *_ = unpad_input(input_ids.unsqueeze(-1), mask)
    data["indices"] = NonTensorData(indices)
    data["input_ids"] = torch.nested.nested_tensor_from_jagged(ids.squeeze(-1), offsets=offsets.long())
    return data


def no_padding_2_padding(output, data):
    from flash_attn.bert_padding import pad_input

    assert "indices" in data, "indices is required in left-right padding data"
    indices, width, seq = (data[key].data for key in ("indices", "max_response_len", "max_seq_len"))
    values = output.values() if output.is_nested else output
    full = pad_input(values.unsqueeze(-1), indices, output.size(0), seq).squeeze(-1)
    return full[:, seq - width - SHIFT : seq - SHIFT]
