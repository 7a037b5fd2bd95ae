"""Dynamic loss scaling for MXNet's fp16 training (the model cast to float16, multi-precision SGD).

Without it, gradients below float16's smallest subnormal (about 6e-8) become zero in the backward
pass and the long test trains on what is left, silently. The loss is multiplied by a scale before
backward; after Horovod's all-reduce every rank checks the same gradients for inf/NaN (MXNet's own
multi_all_finite, as its contrib.amp LossScaler does). A step with an overflow is skipped and the
scale halved; after `growth_interval` good steps in a row it doubles. The scale is undone in the
optimizer's rescale_grad (trainer.update(batch x scale)), with no extra pass over the gradients.

MXNet's contrib.amp has the same scaler, but amp.init_trainer needs amp.init(), which rewrites
MXNet's operators for automatic casting: not the study's recipe (the whole network in float16).
The settings are contrib.amp's: initial 2^16, x2 / 2, growth after 2000 good steps, at most 2^24.
"""

import mxnet as mx


class DynamicLossScale:
    def __init__(self, initial=2.0**16, growth_interval=2000, factor=2.0, maximum=2.0**24, minimum=1.0):
        self.scale, self.initial = float(initial), float(initial)
        self.growth_interval, self.factor = growth_interval, factor
        self.maximum, self.minimum = maximum, minimum
        self.good_steps = 0  # since the last overflow or growth
        self.skipped = 0

    def finite(self, grads):
        """Whether every gradient (NDArrays, on one context) is free of inf and NaN; reads one value
        back to the host."""
        out = mx.nd.ones((1,), ctx=grads[0].context)
        for i in range(0, len(grads), 200):  # multi_all_finite takes a bounded number of inputs
            chunk = grads[i : i + 200]
            mx.nd.multi_all_finite(*chunk, num_arrays=len(chunk), init_output=False, out=out)
        return bool(out.asscalar())

    def update(self, overflow):
        """After a step's gradients were checked: whether to apply the step; adjusts the scale."""
        if overflow:
            self.scale = max(self.minimum, self.scale / self.factor)
            self.good_steps, self.skipped = 0, self.skipped + 1
            return False
        self.good_steps += 1
        if self.good_steps == self.growth_interval:
            self.scale, self.good_steps = min(self.maximum, self.scale * self.factor), 0
        return True

    def settings(self):
        return {
            "kind": "dynamic",
            "initial": self.initial,
            "factor": self.factor,
            "growth_interval": self.growth_interval,
            "maximum": self.maximum,
            "final": self.scale,
            "skipped_steps": self.skipped,
        }


def step_pieces(trainer, trainable, ctx, batch_size, dtype):
    """What one training step does around backward, for the run's precision: (scaler or None,
    scale(loss) -> the loss to call backward on (call it inside autograd.record()), apply() ->
    whether the weights were updated).
    float32 steps as before (trainer.step); float16 scales the loss, all-reduces, checks the
    gradients and updates with the scale undone, or skips the step."""
    if dtype != "float16":

        def apply_plain():
            trainer.step(batch_size)
            return True

        return None, (lambda loss: loss), apply_plain
    scaler = DynamicLossScale()
    used = []

    def scale(loss):
        used[:] = [scaler.scale]
        return loss * scaler.scale

    def apply():
        trainer.allreduce_grads()
        if not scaler.update(not scaler.finite([p.grad(ctx) for p in trainable])):
            return False
        trainer.update(batch_size * used[0])
        return True

    return scaler, scale, apply
