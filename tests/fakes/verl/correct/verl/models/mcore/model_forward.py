"""Stand-in (tests only): verl's engine forward on a thd batch, with the signature and steps of verl's.

Pack the batch and split it over CP, run the model on this rank's rows, pack
each processor argument the same way (the label rolled to the next token),
run the processor, gather each output back into sequences. ``ROLL_LABEL`` is
what a defective tree changes (a composition that leaves out its roll).
"""

from verl.utils.megatron_utils import unwrap_model

from .util import postprocess_thd_engine, preprocess_thd_engine

ROLL_LABEL = True


def gptmodel_forward_model_engine(
    model, input_ids, multi_modal_inputs, logits_processor=None, logits_processor_args=None, value_model=False,
    vision_model=False, pad_token_id=None, data_format="thd", cp_layout="zigzag",
):  # fmt: skip
    assert data_format == "thd" and not multi_modal_inputs
    unwrapped = unwrap_model(model)
    batch = input_ids.shape[0]
    rows, params, _ = preprocess_thd_engine(input_ids, pre_process=unwrapped.pre_process, cp_layout=cp_layout)
    logits = model(input_ids=rows, attention_mask=None, position_ids=None, packed_seq_params=params)
    packed = {
        name: preprocess_thd_engine(value, need_roll=ROLL_LABEL and name == "label", cp_layout=cp_layout)[0]
        for name, value in logits_processor_args.items()
    }
    outputs = logits_processor(logits, **packed)
    return {
        name: postprocess_thd_engine(value, params, input_ids, batch, cp_layout=cp_layout)
        for name, value in outputs.items()
    }
