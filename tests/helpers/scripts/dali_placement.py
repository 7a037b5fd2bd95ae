"""Where each operator of dali_input's GPU training pipeline runs, per --dali-decoder, read from
the pipeline's defined graph (not built: no GPU is needed). Prints JSON {decoder: [[operator,
device], ...]} in graph order:  dali_placement.py"""

import json

from workflow_scripts.train import dali_input


def placement(pipe):
    pipe.serialize()  # defines the graph without building it
    ops = []
    for op in pipe._ops:  # DALI's printed OpSpec: "OpSpec for <schema>" ... "device: <device>"
        lines = [line.strip() for line in str(op.spec).splitlines()]
        ops.append(
            [
                lines[0].removeprefix("OpSpec for ").rstrip(":"),
                next(line.split(":", 1)[1].strip() for line in lines if line.startswith("device:")),
            ]
        )
    return ops


out = {}
for decoder in dali_input.PIPELINES:
    pipe = dali_input.pipeline(
        "/nonexistent",
        0,
        1,
        32,
        False,
        True,
        decoder,
        0.9,
        0.25,
        True,
        (0, 0),
        fast_idct=False,
        batch_size=2,
        num_threads=1,
        device_id=None,
        seed=0,
    )
    out[decoder] = placement(pipe)
print(json.dumps(out))
