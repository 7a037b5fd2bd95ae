"""The messages one training step's gradients go out in, as each library forms them, and whether
any of them can go out while the backward pass still runs (step_model.py's overlap):

- PyTorch DDP (torch/nn/parallel/distributed.py): buckets of bucket_cap_mb, filled in the order the
  backward pass readies the gradients, each all-reduced once full. The first bucket is capped at
  torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES, 1 MiB, only where bucket_cap_mb is left unset;
  the pipeline's trainer passes it, so its first bucket is a full one. The last bucket holds what
  is left. Overlapping unless the step is compiled as one graph (pytorch.ddp_graph whole), whose
  all-reduces start once the whole backward pass has run (docs/decisions.md#ddp_graph).
- Horovod's Tensor Fusion (docs/tensor-fusion.rst and horovod/common/operations.cc,
  https://github.com/horovod/horovod): every cycle (HOROVOD_CYCLE_TIME) the gradients that became
  ready since the last are fused into messages of at most HOROVOD_FUSION_THRESHOLD bytes. Horovod
  0.21 on (the pipeline's 0.28.1) defaults to 1 ms and 128 MiB (its CHANGELOG, #2468); 0.11.3, the
  study's, to 64 MiB and a fixed 5 ms loop. The model takes the gradients to become ready at a
  steady rate over the backward pass, a stated assumption. On GPUs Horovod's loop hands each
  cycle's all-reduces to NCCL's stream and goes on; with Gloo on the CPU it runs them itself, so a
  cycle lasts as long as they do and the next one fuses what became ready meanwhile.
- One message after the backward pass (the study on paper's reading of MXNet's and Caffe2's own
  exchange): nothing can overlap.

Plain Python, as collective_model.py.
"""

from dataclasses import dataclass

MIB = 2**20
DDP_FIRST_BUCKET_BYTES = MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
HOROVOD_FUSION_BYTES = 128 * MIB  # Horovod >= 0.21's default HOROVOD_FUSION_THRESHOLD
HOROVOD_CYCLE_S = 1e-3  # Horovod >= 0.21's default HOROVOD_CYCLE_TIME


@dataclass(frozen=True)
class Sending:
    """A step's messages in bytes, in the order they go out; whether any can go out during the
    backward pass; and how they were formed, in words."""

    messages: tuple
    overlaps: bool
    how: str
    # for messages that depend on how long the all-reduces take (Horovod's loop on the CPU): a
    # function of the seconds an all-reduce of so many bytes takes, giving the messages
    reform: object = None

    def messages_for(self, allreduce_s):
        """The messages where each all-reduce takes allreduce_s(bytes) seconds."""
        return self.reform(allreduce_s) if self.reform else self.messages

    @property
    def gradient_bytes(self):
        return sum(self.messages)


def chunks(nbytes, size):
    """nbytes in messages of `size` and the rest (one message without a size)."""
    if not size or size >= nbytes:
        return [nbytes] if nbytes else []
    full, rest = divmod(nbytes, size)
    return [size] * full + ([rest] if rest else [])


def fixed(gradient_bytes, size, overlaps, how):
    """Messages of one size (prediction.bucket_mb), the rest last."""
    return Sending(tuple(chunks(gradient_bytes, size)), overlaps, how)


def ddp_buckets(gradient_bytes, cap_bytes, first_bytes=None, overlaps=True):
    """DDP's buckets in the order they go out: the first (first_bytes; None: a full one), full
    buckets, then the rest. Bytes, not tensors: a bucket closes on the tensor that fills it, so its
    real size runs over the cap by up to one tensor."""
    first = min(first_bytes or cap_bytes, gradient_bytes)
    messages = (first, *chunks(gradient_bytes - first, cap_bytes))
    graph = "" if overlaps else ", all after the backward pass (one compiled graph: ddp_graph whole)"
    lead = f"a first of {first} B, then " if first_bytes and first_bytes != cap_bytes else ""
    how = f"DDP's buckets: {lead}{cap_bytes} B each, {len(messages)} in all{graph}"
    return Sending(messages, overlaps, how)


def _fusion_cycles(gradient_bytes, backward_s, cycle_s, threshold, busy_s=None):
    """The messages of Horovod's cycles: at each cycle's start, what became ready since the last, in
    messages of at most threshold bytes; the next cycle a cycle later, or once the loop has run
    this cycle's all-reduces itself (busy_s: seconds they take; None: handed to the GPU's stream)."""
    messages, sent, t = [], 0, cycle_s
    while sent < gradient_bytes:
        ready = gradient_bytes if t >= backward_s else min(gradient_bytes, round(gradient_bytes * t / backward_s))
        new = chunks(ready - sent, threshold)
        messages += new
        sent = ready
        t += max(cycle_s, sum(busy_s(b) for b in new)) if busy_s else cycle_s
    return tuple(messages)


def horovod_fusion(
    gradient_bytes, backward_s, cycle_s=HOROVOD_CYCLE_S, threshold=HOROVOD_FUSION_BYTES, loop_runs_allreduce=False
):
    """Horovod's Tensor Fusion over a backward pass of backward_s seconds: each cycle fuses what
    became ready since the last (gradient_bytes / backward_s per second) into messages of at most
    `threshold` bytes. loop_runs_allreduce (Gloo on the CPU): the loop runs each cycle's all-reduces
    itself, so the messages depend on how long they take (Sending.messages_for). Without a backward
    time (no 1-GPU run) the messages are the threshold's: the most fusion can make of them."""
    if not backward_s or backward_s <= 0:
        return Sending(
            tuple(chunks(gradient_bytes, threshold)),
            True,
            f"Horovod's Tensor Fusion: messages of at most {threshold} B (no backward time to form its cycles from)",
        )
    messages = _fusion_cycles(gradient_bytes, backward_s, cycle_s, threshold)
    how = (
        f"Horovod's Tensor Fusion: what a {backward_s * 1e3:.3g} ms backward pass readies each "
        f"{cycle_s * 1e3:g} ms cycle, at most {threshold} B a message"
    )
    if not loop_runs_allreduce:
        return Sending(messages, True, f"{how}, {len(messages)} in all")

    def reform(allreduce_s):
        return _fusion_cycles(gradient_bytes, backward_s, cycle_s, threshold, allreduce_s)

    return Sending(messages, True, f"{how}, each cycle as long as its all-reduces (Gloo: the loop runs them)", reform)


def one_message(gradient_bytes, why):
    """Every gradient in one message after the backward pass: nothing overlaps."""
    return Sending((gradient_bytes,), False, f"one message after the backward pass ({why})")
