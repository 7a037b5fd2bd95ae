# The inference stage (paper section V): the study's networks exported to ONNX, INT8 calibration
# on the first val batches into an explicitly quantized (Q/DQ) model, FP32 and INT8 engines,
# top-1/top-5 on the other val images (Table III) and images/s by batch size (Fig. 9).
#   split -> export -> calibrate -> quantize -> engine -> evaluate | throughput -> the two tables
# Each step is its own rule, so an edit reruns only what it affects: the batch sizes only the
# timing job, the calibration settings calibration onward.
from workflow_scripts.int8.networks import NETWORKS  # noqa: E402
from workflow_scripts.plan import tensorrt_check  # noqa: E402
from workflow_scripts.plan.int8_plan import Int8Plan  # noqa: E402

# What config.yaml's inference section means, checked now (plan/int8_plan.py).
INT8_PLAN = Int8Plan(config, PLAN, SHAPE, CPU_JOB_RESOURCES, LONG_TEST_GPUS)
INFER = config["inference"]
INT8 = f"{RESULTS}/int8"
ENGINE = INT8_PLAN.engine
CALIB = INFER["calibration"]
THROUGHPUT = INFER["throughput"]
BATCH_SIZES = INT8_PLAN.batch_sizes()
for line in stop_on_problem(INT8_PLAN.check):
    print(line, file=sys.stderr)
INFER_SYSTEM = stop_on_problem(INT8_PLAN.system)
# The jobs that run an engine on inference.system's nodes run its PyTorch route, as its training
# runs do (systems.<name>.envs.pytorch, else envs_gpu or envs): a GPU generation or driver that needs
# the CUDA 12 build gets it for INT8 too. Export, calibration and quantization are CPU jobs: envs.pytorch.
INT8_ENV_KEY, INT8_ENV = stop_on_problem(config_checks.framework_env, config, INFER_SYSTEM, "pytorch", REPO, UNBUILT)
INT8_PY = interpreter.job_words(INT8_ENV, REPO, PATH_BLOCKED)
INT8_ROUTE = config_checks.framework_config(config, INFER_SYSTEM, "pytorch")[1]
# A container route is asked on a node instead, and the engine builds wait for its answer.
INT8_ENGINE_CHECKS = INT8_PLAN.engine_checks(INT8_ROUTE)
ACTIVATIONS = stop_on_problem(INT8_PLAN.activations)
# After the config's own checks: TensorRT and pycuda import in the route, or nothing is submitted
# (plan/tensorrt_check.py).
if not IN_SLURM_JOB:
    stop_on_problem(tensorrt_check.check, ENGINE, INT8_ENV_KEY, INT8_ROUTE, INT8_ENV, REPO, unbuilt=UNBUILT)
INT8_MODELS = list(INFER["models"])
TORCH_HOME = INT8_PLAN.torch_home
# What the stage's jobs ask SLURM for (plan/int8_plan.py), named once: the rules and the price
# (rules/price.smk) read the same. Each job's threads inside a SLURM job are its allocation's
# (--cpus-per-task, cluster/cpus.py job_threads): Snakemake's {threads} is capped at the submitting
# host's --cores (profiles/default's `cores: all` is read beside --profile slurm).
INT8_CPU_RESOURCES = {**CPU_JOB_RESOURCES, "cpus_per_task": INFER["threads"]}
INT8_RESOURCES = INT8_PLAN.resources()
INT8_TIMED_RESOURCES = INT8_PLAN.resources(measuring=True)


wildcard_constraints:
    model="|".join(NETWORKS),
    precision="fp32|int8",
    engine="onnxruntime|tensorrt",
    bs=r"\d+",


rule int8_split:
    input:
        rules.index_dataset.output,
    output:
        calibration=f"{INT8}/split/calibration.tsv",
        scoring=f"{INT8}/split/scoring.tsv",
        summary=f"{INT8}/split/split.json",
    log:
        f"{LOGS}/int8/split.log",
    benchmark:
        f"{LOGS}/int8/split.bench.tsv"
    conda:
        "../envs/workflow.yaml"
    params:
        py=PY["workflow"],
        batches=INT8_PLAN.calibration_batches(),
        batch_size=CALIB["batch_size"],
        out_dir=lambda w, output: os.path.dirname(output.summary),
    shell:
        "{params.py:q} -m workflow_scripts.int8.split --index {input:q} --batches {params.batches:q} "
        "--batch-size {params.batch_size:q} --out {params.out_dir:q} > {log:q} 2>&1"


# torchvision's weights, where inference.models asks for them, fetched where snakemake runs (a local
# rule: compute nodes often have no internet) into the cache the export job then reads.
rule int8_weights:
    output:
        f"{DATA}/weights/{{model}}.torchvision.json",
    log:
        f"{LOGS}/int8/{{model}}/weights.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/weights.bench.tsv"
    conda:
        "../envs/torch.yaml"
    params:
        py=PY["pytorch"],
        torch_home=TORCH_HOME,
    shell:
        "{params.py:q} -m workflow_scripts.int8.fetch_weights --network {wildcards.model} "
        "--torch-home {params.torch_home:q} --key inference.models.{wildcards.model} --out {output:q} > {log:q} 2>&1"


rule int8_export:
    input:
        weights=INT8_PLAN.export_weights,
    output:
        onnx=f"{INT8}/{{model}}/fp32.onnx",
        info=f"{INT8}/{{model}}/model.json",
    log:
        f"{LOGS}/int8/{{model}}/export.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/export.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: INFER["threads"]
    resources:
        **INT8_CPU_RESOURCES,
    params:
        py=PY["pytorch"],
        args=INT8_PLAN.export_args,
        image_size=INFER["image_size"],
    shell:
        "{params.py:q} -m workflow_scripts.int8.export --network {wildcards.model} {params.args:q} "
        "--key inference.models.{wildcards.model} --image-size {params.image_size:q} --threads {threads} "
        "--cpus-per-task {resources.cpus_per_task:q} "
        "--out {output.onnx:q} --info {output.info:q} > {log:q} 2>&1"


rule int8_calibrate:
    input:
        onnx=rules.int8_export.output.onnx,
        images=rules.int8_split.output.calibration,
        lmdb=rules.lmdb.output,
    output:
        f"{INT8}/{{model}}/calibration_ranges.json",
    log:
        f"{LOGS}/int8/{{model}}/calibrate.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/calibrate.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: INFER["threads"]
    resources:
        **INT8_CPU_RESOURCES,
    params:
        lmdb=lambda w, input: folders_of(input.lmdb)[0],
        py=PY["pytorch"],
        args=INT8_PLAN.calibration_args(),
        image_size=INFER["image_size"],
        batch_size=CALIB["batch_size"],
    shell:
        "{params.py:q} -m workflow_scripts.int8.calibrate --onnx {input.onnx:q} --images {input.images:q} "
        "--lmdb {params.lmdb:q} --image-size {params.image_size:q} --batch-size {params.batch_size:q} {params.args:q} "
        "--threads {threads} --cpus-per-task {resources.cpus_per_task:q} --out {output:q} > {log:q} 2>&1"


rule int8_quantize:
    input:
        onnx=rules.int8_export.output.onnx,
        ranges=rules.int8_calibrate.output,
    output:
        onnx=f"{INT8}/{{model}}/int8.onnx",
        cache=f"{INT8}/{{model}}/calibration_cache.json",
    log:
        f"{LOGS}/int8/{{model}}/quantize.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/quantize.bench.tsv"
    conda:
        "../envs/torch.yaml"
    params:
        py=PY["pytorch"],
        activations=ACTIVATIONS,
        bias=INT8_PLAN.bias(),
        engine=ENGINE,
        per_channel=int(INFER["quantization"]["per_channel"]),
        calibration_images=INT8_PLAN.calibration_batches() * CALIB["batch_size"],
    shell:
        "{params.py:q} -m workflow_scripts.int8.quantize --onnx {input.onnx:q} --ranges {input.ranges:q} "
        "--activations {params.activations:q} --bias {params.bias:q} --engine {params.engine:q} "
        "--per-channel {params.per_channel:q} "
        "--calibration-images {params.calibration_images:q} --out {output.onnx:q} --cache {output.cache:q} > {log:q} 2>&1"


# With TensorRT on a container route: whether the container's python imports tensorrt (>= 10) and
# pycuda, asked on a node of inference.system with its GPU (int8/engine_imports.py); a route that
# cannot fails this job, naming the key and the fix for the node's driver, and no engine job starts.
rule int8_engine_check:
    output:
        f"{RESULTS}/preflight/int8/{INFER_SYSTEM}.engine.json",
    log:
        f"{LOGS}/preflight/int8_{INFER_SYSTEM}.engine.log",
    benchmark:
        f"{LOGS}/preflight/int8_{INFER_SYSTEM}.engine.bench.tsv"
    # a failed check is the answer, not a fluke
    retries: 0
    conda:
        "../envs/torch.yaml"
    resources:
        **INT8_PLAN.check_resources(),
    params:
        py=INT8_PY,
        key=INT8_ENV_KEY,
    shell:
        "{params.py:q} -m workflow_scripts.int8.engine_imports --require --key {params.key:q} --out {output:q} "
        "> {log:q} 2>&1"


rule int8_engine:
    input:
        onnx=f"{INT8}/{{model}}/{{precision}}.onnx",
        checked=INT8_ENGINE_CHECKS,
    output:
        engine=f"{INT8}/{{model}}/{{engine}}/{{precision}}.engine",
        info=f"{INT8}/{{model}}/{{engine}}/{{precision}}.engine.json",
    log:
        f"{LOGS}/int8/{{model}}/{{engine}}/{{precision}}.engine.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/{{engine}}/{{precision}}.engine.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: INFER["threads"]
    resources:
        **INT8_RESOURCES,
    params:
        py=INT8_PY,
        args=INT8_PLAN.engine_args(),
    shell:
        "{params.py:q} -m workflow_scripts.int8.build_engine --engine {wildcards.engine} --onnx {input.onnx:q} "
        "--precision {wildcards.precision} --threads {threads} --cpus-per-task {resources.cpus_per_task:q} "
        "{params.args:q} --out {output.engine:q} "
        "--info {output.info:q} > {log:q} 2>&1"


rule int8_evaluate:
    input:
        engine=rules.int8_engine.output.engine,
        images=rules.int8_split.output.scoring,
        lmdb=rules.lmdb.output,
    output:
        counts=f"{INT8}/{{model}}/{{engine}}/{{precision}}.eval.json",
        predictions=f"{INT8}/{{model}}/{{engine}}/{{precision}}.predictions.tsv",
    log:
        f"{LOGS}/int8/{{model}}/{{engine}}/{{precision}}.evaluate.log",
    benchmark:
        f"{LOGS}/int8/{{model}}/{{engine}}/{{precision}}.evaluate.bench.tsv"
    conda:
        "../envs/torch.yaml"
    threads: INFER["threads"]
    resources:
        **INT8_RESOURCES,
    params:
        lmdb=lambda w, input: folders_of(input.lmdb)[0],
        py=INT8_PY,
        image_size=INFER["image_size"],
        batch_size=INFER["batch_size"],
    shell:
        "{params.py:q} -m workflow_scripts.int8.evaluate --engine {wildcards.engine} --engine-file {input.engine:q} "
        "--precision {wildcards.precision} --network {wildcards.model} --images {input.images:q} --lmdb {params.lmdb:q} "
        "--image-size {params.image_size:q} --batch-size {params.batch_size:q} --threads {threads} "
        "--cpus-per-task {resources.cpus_per_task:q} --out {output.counts:q} --predictions {output.predictions:q} > {log:q} 2>&1"
