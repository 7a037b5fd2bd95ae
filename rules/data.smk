# The data stage: ILSVRC2012 raw layout -> index -> TFRecord (TensorFlow), RecordIO (MXNet),
# LMDB (Caffe2's format, read by PyTorch). Paper section IV-E.


rule embedded_dataset:
    output:
        directory(f"{DATA}/embedded/ILSVRC2012"),
    log:
        f"{LOGS}/data/embedded_dataset.log",
    benchmark:
        f"{LOGS}/data/embedded_dataset.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        emb=config["dataset"]["embedded"],
    shell:
        "{params.py:q} -m workflow_scripts.data.embedded --out {output:q} "
        "--classes {params.emb[classes]} --train-per-class {params.emb[train_per_class]} "
        "--val-per-class {params.emb[val_per_class]} --seed {params.emb[seed]} "
        "--val-layout {params.emb[val_layout]} > {log:q} 2>&1"


rule index_dataset:
    input:
        dataset=DATASET_ROOT if EMBEDDED else [],
    output:
        directory(f"{DATA}/index"),
    log:
        f"{LOGS}/data/index_dataset.log",
    benchmark:
        f"{LOGS}/data/index_dataset.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    threads: CONV["threads"]
    resources:
        **CPU_JOB_RESOURCES,
        cpus_per_task=CONV["threads"],
        # how long a real tree must have been still (changing it reruns nothing); the embedded
        # default is written by the job before
        settle_s=0 if EMBEDDED else config["dataset"]["settle_s"],
        # whether a positional val label file may be cut to a val subset: it decides whether the index
        # is made, never what it holds (changing it reruns nothing)
        val_subset=int(config["dataset"]["val_subset"]),
    params:
        py=PY["workflow"],
        root=lambda w, input: input.dataset or DATASET_ROOT,
        val_labels=config["dataset"]["val_labels"],
        # image-net.org's archives where they are not in dataset.root (data/archives.py)
        archives=DATA_PLAN.archive_args(),
        shuffle_seed=CONV["shuffle_seed"],
        max_rejects=CONV["max_reject_fraction"],
        # not on the command line: its change reruns the index (rules/common.smk, DATASET_CONTENTS)
        contents=DATASET_CONTENTS,
    shell:
        "{params.py:q} -m workflow_scripts.data.index --root {params.root:q} --out {output:q} "
        "--val-labels={params.val_labels:q} {params.archives:q} --val-subset={resources.val_subset} --settle-s {resources.settle_s} --shuffle-seed {params.shuffle_seed} "
        "--max-reject-fraction {params.max_rejects} --threads {threads} --cpus-per-task {resources.cpus_per_task} > {log:q} 2>&1"


# The three converters stay three rules, each with its own command: `use rule` cannot change a
# shell, Snakemake reruns a job whose shell text changed (a rule with a format wildcard would
# reconvert every copy once), and a rule built in a loop evaluates its shell when the job runs,
# with the loop's last values.
rule tfrecord:
    input:
        rules.index_dataset.output,
    output:
        converted("tfrecord"),
    log:
        f"{LOGS}/data/tfrecord.log",
    benchmark:
        f"{LOGS}/data/tfrecord.bench.tsv"
    conda:
        "../envs/tf-mxnet.yaml"
    threads: CONV["threads"]
    resources:
        **CPU_JOB_RESOURCES,
        cpus_per_task=CONV["threads"],
        # where there is no room for both, the complete earlier copy goes first (changing it reruns nothing)
        delete_old=int(CONV["delete_old"]),
    params:
        py=PY["tensorflow"],
        encoding=DATA_PLAN.encoding_args(),
        out=lambda w, output: os.path.dirname(output[0]),
        train_shards=DATA_PLAN.tfrecord_shards("train"),
        val_shards=DATA_PLAN.tfrecord_shards("val"),
        label_offset=CONV["tfrecord"]["label_offset"],
    shell:
        "{params.py:q} -m workflow_scripts.data.tfrecord --index {input:q} --out {params.out:q} "
        "--delete-old={resources.delete_old} "
        "--threads {threads} --cpus-per-task {resources.cpus_per_task} {params.encoding:q} --train-shards {params.train_shards} "
        "--val-shards {params.val_shards} --label-offset {params.label_offset} > {log:q} 2>&1"


rule recordio:
    input:
        rules.index_dataset.output,
    output:
        converted("recordio"),
    log:
        f"{LOGS}/data/recordio.log",
    benchmark:
        f"{LOGS}/data/recordio.bench.tsv"
    conda:
        "../envs/tf-mxnet.yaml"
    threads: CONV["threads"]
    resources:
        **CPU_JOB_RESOURCES,
        cpus_per_task=CONV["threads"],
        # where there is no room for both, the complete earlier copy goes first (changing it reruns nothing)
        delete_old=int(CONV["delete_old"]),
    params:
        py=PY["mxnet"],
        encoding=DATA_PLAN.encoding_args(),
        out=lambda w, output: os.path.dirname(output[0]),
    shell:
        "{params.py:q} -m workflow_scripts.data.recordio --index {input:q} --out {params.out:q} "
        "--delete-old={resources.delete_old} "
        "--threads {threads} --cpus-per-task {resources.cpus_per_task} {params.encoding:q} > {log:q} 2>&1"


rule lmdb:
    input:
        rules.index_dataset.output,
    output:
        converted("lmdb"),
    log:
        f"{LOGS}/data/lmdb.log",
    benchmark:
        f"{LOGS}/data/lmdb.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: CONV["threads"]
    resources:
        **CPU_JOB_RESOURCES,
        cpus_per_task=CONV["threads"],
        # where there is no room for both, the complete earlier copy goes first (changing it reruns nothing)
        delete_old=int(CONV["delete_old"]),
    params:
        py=PY["pytorch"],
        encoding=DATA_PLAN.encoding_args(),
        out=lambda w, output: os.path.dirname(output[0]),
    shell:
        "{params.py:q} -m workflow_scripts.data.lmdb_caffe2 --index {input:q} --out {params.out:q} "
        "--delete-old={resources.delete_old} "
        "--threads {threads} --cpus-per-task {resources.cpus_per_task} {params.encoding:q} > {log:q} 2>&1"


# The whole-file check (docs/data.md#the-whole-file-check): every converted file against its
# manifest's sha256, in parallel, once after conversion; recorded with each file's size and mtime,
# so that a training job hashes again only what changed since.
rule data_check:
    input:
        converted("{format}"),
    output:
        check_record("{format}"),
    log:
        f"{LOGS}/data/check_{{format}}.log",
    benchmark:
        f"{LOGS}/data/check_{{format}}.bench.tsv"
    wildcard_constraints:
        format="tfrecord|recordio|lmdb",
    conda:
        lambda w: conda_env(FRAMEWORK_OF_FORMAT[w.format])
    threads: CONV["threads"]
    resources:
        **CPU_JOB_RESOURCES,
        cpus_per_task=CONV["threads"],
    params:
        # the interpreter whose reader the format needs (lmdb's package for an LMDB)
        py=lambda w: PY[FRAMEWORK_OF_FORMAT[w.format]],
        data=lambda w, input: os.path.dirname(input[0]),
    shell:
        "{params.py:q} -m workflow_scripts.data.verify --data {params.data:q} --record {output:q} "
        "--threads {threads} --cpus-per-task {resources.cpus_per_task} > {log:q} 2>&1"


rule data:
    input:
        rules.tfrecord.output,
        rules.recordio.output,
        rules.lmdb.output,
        [check_record(fmt) for fmt in ("tfrecord", "recordio", "lmdb")],
