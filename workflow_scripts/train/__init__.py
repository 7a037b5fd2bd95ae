"""The training stage: ResNet-50 data-parallel training, one adapter per framework around one timed
loop, all writing the same per-iteration log and summary.

The ranks:

    `loop`                 the one timed loop and main() of the three trainers (Adapter)
    `harness`              what the trainers share: arguments, run directory, step log, summary
    `trainer_flags`        the config keys a trainer takes as flags, in the order the rules pass them
    `long_test`            the long test (mode accuracy): schedule, evaluation, target top-1
    `checkpoint`           the long test's checkpoint, so that it goes on in the next job
    `long_test_fit`        whether a long test's epochs can fit its jobs
    `rendezvous`           Horovod's Gloo rendezvous server, for ranks that srun or the launcher start
    `input_capacity`       a framework's input path alone: images/s it can hand a rank
    `thread_cpu`           the CPU cores each group of a rank's threads used over the timed steps

Per framework, its adapter and what only it uses:

    `tensorflow_horovod`   TensorFlow + Horovod, from TFRecord (+ `keras_compat`: Keras 2 or 3)
    `mxnet_horovod`        MXNet + Horovod, from RecordIO (+ `mxnet_loss_scale`: fp16 loss scaling)
    `pytorch_ddp`          PyTorch DDP, from the LMDB (+ `pytorch_options`: training.pytorch's flags
                           and what each auto becomes; `pytorch_threads`: its thread rule, which
                           its record names; `pytorch_input`: its input paths; `augment`:
                           their augmentation's constants; `gpu_input`: decoding on the GPU;
                           `dali_input`: NVIDIA DALI's pipeline)

The job around the ranks (rules/train.smk runs it):

    `training_job`         one attempt of one run
    `measuring_job`        the sequence training and preflight jobs share
    `job_stop`             how a job ends when it is stopped from outside (SLURM's TERM, time limit)
    `watchdog`             the progress watchdog: a run whose ranks stop stepping is stopped as hung
    `run_evidence`         what the job adds to a finished run's summary once the ranks exited
    `failure`              a run that failed on its last attempt, recorded as a result
"""
