"""ms-swift's Megatron GRPO log-prob and entropy as a token target.

The file: ``swift/megatron/trainers/vocab_parallel_utils.py``.

Root: ``LPH_MS_SWIFT_PATH`` (the gate's ``--no-deps`` install of
``ms_swift==X``, or a checkout) or the installed ``swift`` package. Only
``vocab_parallel_utils.py`` is executed (as a private module; ms-swift's
package ``__init__`` files import transformers, peft, modelscope...). Its
imports are ``from megatron.core import mpu, tensor_parallel``: ``mpu`` is the
harness's Megatron stand-in (the TP group of the job) and ``tensor_parallel``
holds Megatron's own ``vocab_parallel_cross_entropy`` from a Megatron-LM
checkout (``harness.targets.ms_swift.megatron_ce``; ``LPH_MEGATRON_PATH``).

What the adapter calls is what ms-swift's Megatron GRPO trainer calls in its
forward step: ``compute_logps_and_entropy_from_logits(logits, labels,
compute_entropy=...)`` on ``[1, rows, V_local]`` logits (its packed,
padding-free form) and ``[1, rows]`` labels, which are the protocol's targets
(Megatron's batch is already shifted; never ``-100``). Its log-probs are
``-vocab_parallel_cross_entropy`` (Megatron's); its entropy is ms-swift's own
``vocab_parallel_log_softmax`` (max and a differentiable all-reduce of
``sum exp``) then ``vocab_parallel_entropy`` (``-sum p log p`` per shard,
all-reduced; rows in chunks of 512), with its gradient (ms-swift builds it in
the training graph). Temperature: ms-swift's trainer divides the logits by it
first (``logits_packed.div_(temperature)``); the adapter divides out of place
(the protocol's logits are the caller's).

Megatron's cross entropy subtracts the row max from its input IN PLACE, which
ms-swift documents (``vocab_parallel_gather_logps``: callers must not read the
logits again) and its trainer honours (it passes its own fresh model output,
divided in place by the temperature). The protocol's logits are the caller's,
so the adapter hands ms-swift a fresh tensor the same way: the division out of
place, or a copy at temperature 1 (a copy a trainer does not make, so the
memory checks charge ms-swift one logits buffer more than its trainer uses).

Not declared, hence UNSUPPORTED: ``entropy_gate`` (no switch: the entropy is
always built with its graph), ``chunking`` (only the entropy is chunked, at a
fixed 512 rows), ``packed`` (its CP/padding reconstruction lives in the trainer
class), ``policy_loss`` from logits (its Megatron GRPO loss is a method of the
Megatron trainer and needs its batch objects). The GRPO loss of its
Hugging Face trainer is the token-level policy loss
(``harness/targets/ms_swift/policy.py``), where the tree has it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.targets.ms_swift import megatron_ce
from harness.targets.ms_swift.policy import GRPO_TRAINER, MsSwiftPolicyTarget
from harness.targets.protocol import Target
from harness.targets.upstream import located, megatron_stand_in

PATH_VARIABLE = "LPH_MS_SWIFT_PATH"
UTILS = Path("swift/megatron/trainers/vocab_parallel_utils.py")


def ms_swift_root() -> Path:
    return located.package_root(
        "swift", PATH_VARIABLE, UTILS, "`pip install --no-deps ms-swift==X` (`nox -s upstream -- ms_swift==X`)"
    )


def load_utils(root: Path, megatron: Path):
    megatron_ce.tensor_parallel(megatron)
    spec = importlib.util.spec_from_file_location("lph_upstream_ms_swift_vocab_parallel_utils", root / UTILS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "compute_logps_and_entropy_from_logits"):
        raise AttributeError(f"{root / UTILS} has no compute_logps_and_entropy_from_logits: version not supported")
    return module


class MsSwiftTarget(Target):
    capabilities = frozenset({"token", "entropy", "temperature"})
    # what a history replay keys revisions by (Megatron's cross entropy comes from LPH_MEGATRON_PATH, held fixed)
    files_under_test = (str(UTILS), str(GRPO_TRAINER))

    def __init__(self, root: Path | None = None, megatron: Path | None = None):
        self.root = ms_swift_root() if root is None else Path(root)
        self.name = f"ms-swift-{located.version(self.root, 'ms-swift')}"
        self.module = load_utils(self.root, megatron_ce.megatron_root() if megatron is None else Path(megatron))
        try:
            self.policy = MsSwiftPolicyTarget(self.root)
        except (FileNotFoundError, LookupError):  # a tree without GRPOTrainer._compute_loss_and_metrics
            self.policy = None
        else:
            self.capabilities = self.capabilities | self.policy.capabilities

    def token_policy_loss(self, log_probs, **arguments):
        return self.policy.token_policy_loss(log_probs, **arguments)

    def token_log_probs(self, logits, targets, *, tp_group, chunk_size, with_entropy, entropy_grad, temperature):
        if chunk_size is not None or (with_entropy and not entropy_grad):
            raise RuntimeError(f"{self.name}: no chunk and no entropy gate (capabilities not declared)")
        megatron_stand_in.set_groups(tp_group, None)
        # The trainer's logits are its own fresh model output (divided in place); the protocol's are the caller's.
        logits = logits / temperature if temperature != 1.0 else logits.clone()
        log_probs, entropy = self.module.compute_logps_and_entropy_from_logits(
            logits.unsqueeze(0), targets.unsqueeze(0), compute_entropy=with_entropy
        )
        return log_probs.squeeze(0), None if entropy is None else entropy.squeeze(0)
