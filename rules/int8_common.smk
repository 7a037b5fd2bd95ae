# Settings and helpers of the inference stage (rules/int8.smk): what config.yaml's inference
# section means, checked when the workflow is parsed.
from workflow_scripts.common import schema as config_schema  # noqa: E402
from workflow_scripts.infer import build_engine  # noqa: E402
from workflow_scripts.infer.networks import NETWORKS  # noqa: E402

INFER = config["inference"]
INT8 = f"{RESULTS}/int8"
ENGINE = INFER["engine"]
TENSORRT = ENGINE == "tensorrt"
CALIB = INFER["calibration"]
THROUGHPUT = INFER["throughput"]


def calibration_batches():
    """'auto' is the study's 50 batches for a real dataset, 4 (100 of 320 images) for the embedded one."""
    value = CALIB["batches"]
    return value if value != "auto" else (50 if not EMBEDDED else 4)


def throughput_batch_sizes():
    """'auto' is the study's 1..256 for a real dataset, three sizes for the embedded one."""
    value = THROUGHPUT["batch_sizes"]
    if value != "auto":
        return value
    return [1, 2, 4, 8, 16, 32, 64, 128, 256] if not EMBEDDED else [1, 8, 32]


def activation_type():
    """auto: what each engine runs fast and right. TensorRT's explicit quantization takes only
    symmetric INT8; ONNX Runtime's CPU kernels are U8S8 (a symmetric INT8 ReLU output also keeps
    its ReLU between the Q/DQ pair, which blocks the integer convolution)."""
    value = INFER["quantization"]["activations"]
    if value == "auto":
        return "int8" if TENSORRT else "uint8"
    if TENSORRT and value != "int8":
        raise WorkflowError(
            f"config inference.quantization.activations = {value}: TensorRT runs only symmetric "
            f"int8 Q/DQ models (explicit quantization); use auto or int8"
        )
    return value


def pipeline_missing():
    """Why this plan has no run whose weights 'pipeline' can mean (None where it has one): no
    PyTorch, or a real dataset without the long test (a short test's weights only guess, so Table
    III would decide nothing)."""
    if "pytorch" not in TRAIN["frameworks"]:
        return "config training.frameworks has no pytorch, whose run trains them"
    if not EMBEDDED and not LONG_TEST_GPUS:
        return (
            "on a real dataset they come from the long test, trained to accuracy, and training.accuracy.gpus "
            "plans none (set it, e.g. [8], or give resnet50 'torchvision' or a weights file)"
        )
    return None


def pipeline_run():
    """The training run whose weights 'pipeline' means: on a real dataset the long test's PyTorch
    run (trained to accuracy); on the embedded default the PyTorch run on the first system with the
    most GPUs (in steps mode the one that saw the most images), on its first real-data input path,
    FP32 if it is trained (its weights are FP32 either way). A sweep of synthetic data only takes
    the long test's run where there is one: it trained on the images that are scored."""
    precision = "fp32" if "fp32" in TRAIN["precisions"] else TRAIN["precisions"][0]
    system = TRAIN["systems"][0]
    paths = sorted(run_inputs(system, "pytorch"), key=lambda i: i == "synthetic")
    if (paths[0] == "synthetic" or not EMBEDDED) and LONG_TEST_GPUS:
        return accuracy_run_dir(system, "pytorch", precision, max(LONG_TEST_GPUS))
    # Otherwise synthetic weights are still quantized: the verdict table says their accuracy means
    # nothing (no better than guessing).
    return run_dir(system, "pytorch", precision, max(TRAIN["gpus"]), paths[0])


def _check_inference():
    """A model without weights, or a table naming a model that is not evaluated, stops the run now."""
    for name, source in list(INFER["models"].items()):
        key = f"inference.models.{name}"
        if source == "pipeline":
            if name != "resnet50":
                raise WorkflowError(
                    f"config {key} = pipeline: the training stage trains ResNet-50 only; give {name} "
                    f"'torchvision' or a weights file"
                )
            missing = pipeline_missing()
            if missing:
                # Not offered, rather than a plan that fails to parse: the rest of the study runs.
                print(f"dlscale: {key} = pipeline left out of the INT8 stage: {missing}", file=sys.stderr)
                del INFER["models"][name]
                THROUGHPUT["models"] = [m for m in THROUGHPUT["models"] if m != name]
        elif source != "torchvision":
            check_path(key, source, file_pattern=True)
            if not Path(source).is_file():
                raise WorkflowError(
                    f"config {key} = {source!r}: no such weights file (or use 'torchvision', or 'pipeline' "
                    f"for resnet50)"
                )
    for name in THROUGHPUT["models"]:
        if name not in INFER["models"]:
            raise WorkflowError(f"config inference.throughput.models names {name}, which is not in inference.models")
    if TENSORRT:
        largest = max(BATCH_SIZES + [INFER["batch_size"]])
        if largest > INFER["tensorrt"]["max_batch"]:
            raise WorkflowError(
                f"config inference.tensorrt.max_batch = {INFER['tensorrt']['max_batch']} is below batch "
                f"{largest} (inference.throughput.batch_sizes / inference.batch_size)"
            )


def inference_system():
    """The system (under systems:) whose nodes build, score and time the engines: inference.system,
    or the first of training.systems. One name for all of them, so that a cluster gives every
    inference job the same kind of node."""
    name = INFER["system"] or TRAIN["systems"][0]
    if name not in config["systems"]:
        raise WorkflowError(
            f"config inference.system = {name!r} is not defined under config systems (defined: "
            f"{', '.join(config['systems'])}): name one of them, or leave it \"\" for the first of training.systems"
        )
    return name


BATCH_SIZES = throughput_batch_sizes()
_check_inference()
INFER_SYSTEM = inference_system()
ACTIVATIONS = activation_type()
# TensorRT's parser dequantizes INT8 only, so its model keeps float biases; ONNX Runtime's integer
# kernels take INT32 ones.
BIAS = "float" if TENSORRT else "int32"
INT8_MODELS = list(INFER["models"])


TORCH_HOME = f"{DATA}/weights/torch"  # torchvision's weights, fetched on the login node (int8_weights)


def export_weights(w):
    source = INFER["models"][w.model]
    if source == "pipeline":
        return f"{pipeline_run()}/summary.json"
    return f"{DATA}/weights/{w.model}.torchvision.json" if source == "torchvision" else source


def export_args(w, input):
    source = INFER["models"][w.model]
    if source == "pipeline":
        return ["--source", "pipeline", "--weights", f"{os.path.dirname(input.weights)}/weights.pt"]
    if source == "torchvision":
        return ["--source", "torchvision", "--torch-home", TORCH_HOME]
    return ["--source", "file", "--weights", source]


def calibration_args():
    """Only what the chosen method uses, so editing another method's setting reruns nothing."""
    method = CALIB["method"]
    keys = ["method", "chunk_batches"] + (["histogram_bins"] if method in ("entropy", "percentile") else [])
    return config_schema.argv(CALIB, "inference.calibration", keys + (["percentile"] if method == "percentile" else []))


def engine_args():
    return config_schema.argv(INFER["tensorrt"], "inference.tensorrt", build_engine.BUILD) if TENSORRT else []


def inference_resources(measuring=False):
    """What an engine build, evaluation or timed job asks SLURM for: inference.system's partition,
    account, constraint and qos, and with TensorRT one GPU of its gpu_type, requested as the system
    requests GPUs (a system without a gpu_request: one GPU of any type). A measuring job of TensorRT
    (the timed runs) also takes its node alone (exclusive_flags), as training runs do; ONNX Runtime's
    are CPU figures that back no verdict, so they neither hold a GPU nor take a GPU node alone. Run
    locally, none of this applies."""
    sysc = config["systems"][INFER_SYSTEM]
    request = sysc["gpu_request"]

    def tensorrt(w):
        return w.engine == "tensorrt"

    def extra(w):
        words = exclusive_flags(INFER_SYSTEM) if measuring and tensorrt(w) else []
        if tensorrt(w) and request == "gpus-per-node":
            words.append(SHAPE.gpu_flag(INFER_SYSTEM, 1))
        return shlex.join(words) if words else None

    cpu = CPU_JOB_RESOURCES if not TENSORRT else {}  # ONNX Runtime: a CPU job, on cpu_jobs' partition where set
    return dict(
        cpus_per_task=INFER["threads"],
        slurm_partition=cpu.get("slurm_partition") or system_resource(INFER_SYSTEM, "partition"),
        **({"runtime": cpu["runtime"]} if "runtime" in cpu else {}),
        slurm_account=system_resource(INFER_SYSTEM, "account"),
        constraint=system_resource(INFER_SYSTEM, "constraint"),
        qos=system_resource(INFER_SYSTEM, "qos"),
        # the plugin takes gres only as its own resource, never in slurm_extra
        gres=lambda w: f"gpu:{SHAPE.gpus_of_node(INFER_SYSTEM, 1)}" if tensorrt(w) and request == "gres" else None,
        gpu=lambda w: 1 if tensorrt(w) and request == "none" else None,
        slurm_extra=extra,
    )


wildcard_constraints:
    model="|".join(NETWORKS),
    precision="fp32|int8",
    engine="onnxruntime|tensorrt",
    bs=r"\d+",


def engine_threads(w, threads):
    """inference.threads, capped at the cores a local run gave the job."""
    return min(INFER["threads"], threads) if workflow.local_exec else INFER["threads"]


def throughput_durations(w):
    """TensorRT's timed runs by duration too (trtexec's warm-up and duration); ONNX Runtime's by count."""
    if w.engine != "tensorrt":
        return []
    return [f"--warmup-s={INFER['tensorrt']['warmup_ms'] / 1000}", f"--duration-s={INFER['tensorrt']['duration_s']}"]
