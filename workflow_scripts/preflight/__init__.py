"""Preflight: each system x framework of the sweep checked in minutes, launched exactly as its
training runs are, before the sweep queues hours of jobs (rules/preflight.smk).

    `preflight_job`   one check job: the node checks, then the task checks, a phase stopped when it stalls
    `node`            per node (workflow interpreter): page-cache clearing, the dataset, readability
    `rank`            per task (framework interpreter): GPU, tiny-net kernel, all-reduce, CPUs
    `fw_tensorflow`   TensorFlow's tiny net and all-reduce path, as its trainer's
    `fw_mxnet`        MXNet's
    `fw_pytorch`      PyTorch's
    `horovod_ranks`   what the two Horovod frameworks share in preflight
    `phase_markers`   per-rank progress markers, so a hung check says where it hung
    `owners`          where preflight asks the module that owns an answer (kernel failures, threads, data)
    `input_task`      the input check's decode threads, once on a pair's first node
    `input_rows`      the input check's rows (judged by common/input_bound)
    `check_rows`      one checked item: what, where, its status, figure, cause and fix
    `table`           results/preflight.csv and .md
    `gate`            the file a pair's training and interconnect jobs wait for
"""
