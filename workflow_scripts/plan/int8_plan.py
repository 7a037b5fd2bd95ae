"""The inference stage's plan (rules/int8.smk): what config.yaml's inference section means, checked
when the workflow is parsed: the models and where their weights come from, the batches, the
engine's settings and the SLURM resources of its jobs. Methods that take `w` are called by
Snakemake with a job's wildcards."""

import math
import os
import shlex

from workflow_scripts.common import schema as config_schema
from workflow_scripts.int8 import build_engine
from workflow_scripts.plan import config_checks
from workflow_scripts.plan.sweep import ConfigProblem, requests_gpus
from workflow_scripts.plan.waiting import Waiting, run_files

CHECK_MIN = 10  # the engine check imports two packages: minutes at most, even from a cold image


class Int8Plan:
    def __init__(self, config, sweep, shape, cpu_jobs, long_test_gpus, is_file=os.path.isfile):
        """sweep, shape: the config's plan.sweep.Sweep and plan.slurm_job.JobShape; cpu_jobs: the CPU
        stages' SLURM resources (plan.data_plan.DataPlan.cpu_job_resources); long_test_gpus: the long
        test's GPU counts; is_file: whether a weights file is there."""
        self.config, self.sweep, self.shape, self.cpu_jobs = config, sweep, shape, cpu_jobs
        self.long_test_gpus, self.is_file = long_test_gpus, is_file
        self.train, self.infer = config["training"], config["inference"]
        self.calib, self.throughput = self.infer["calibration"], self.infer["throughput"]
        self.embedded = not config["dataset"]["root"]
        # resolved once, in config too, so that every reader of the key sees the engine that runs
        self.engine = self.infer["engine"] = self.resolved_engine()
        self.tensorrt = self.engine == "tensorrt"
        # torchvision's weights, fetched on the login node (int8_weights)
        self.torch_home = f"{config['data_dir']}/weights/torch"

    def resolved_engine(self):
        """auto: TensorRT where the inference system asks SLURM for GPUs, else ONNX Runtime (the
        preset's choice, so that one file serves a GPU cluster and a CPU one). A system name that is
        not under systems: is left to system() to refuse, naming the key."""
        value = self.infer["engine"]
        if value != "auto":
            return value
        sysc = self.config["systems"].get(self.infer["system"] or self.train["systems"][0])
        return "tensorrt" if sysc and requests_gpus(sysc) else "onnxruntime"

    def calibration_batches(self):
        """'auto' is the study's 50 batches for a real dataset, 4 (100 of 320 images) for the embedded one."""
        value = self.calib["batches"]
        return value if value != "auto" else (50 if not self.embedded else 4)

    def batch_sizes(self):
        """'auto' is the study's 1..256 for a real dataset, three sizes for the embedded one."""
        value = self.throughput["batch_sizes"]
        if value != "auto":
            return value
        return [1, 2, 4, 8, 16, 32, 64, 128, 256] if not self.embedded else [1, 8, 32]

    def activations(self):
        """auto: what each engine runs fast and right. TensorRT's explicit quantization takes only
        symmetric INT8; ONNX Runtime's CPU kernels are U8S8 (a symmetric INT8 ReLU output also keeps
        its ReLU between the Q/DQ pair, which blocks the integer convolution)."""
        value = self.infer["quantization"]["activations"]
        if value == "auto":
            return "int8" if self.tensorrt else "uint8"
        if self.tensorrt and value != "int8":
            raise ConfigProblem(
                f"config inference.quantization.activations = {value}: TensorRT runs only symmetric "
                f"int8 Q/DQ models (explicit quantization); use auto or int8"
            )
        return value

    def bias(self):
        """TensorRT's parser dequantizes INT8 only, so its model keeps float biases; ONNX Runtime's
        integer kernels take INT32 ones."""
        return "float" if self.tensorrt else "int32"

    def pipeline_missing(self):
        """Why this plan has no run whose weights 'pipeline' can mean (None where it has one): no
        PyTorch, or a real dataset without the long test (a short test's weights only guess, so Table
        III would decide nothing)."""
        if "pytorch" not in self.train["frameworks"]:
            return "config training.frameworks has no pytorch, whose run trains them"
        if not self.embedded and not self.long_test_gpus:
            return (
                "on a real dataset they come from the long test, trained to accuracy, and training.long_test.gpus "
                "plans none (set it, e.g. [8], or give resnet50 'torchvision' or a weights file)"
            )
        return None

    def pipeline_run(self):
        """The training run whose weights 'pipeline' means: on a real dataset the long test's PyTorch
        run (trained to accuracy); on the embedded default the PyTorch run on the first system with the
        most GPUs (in steps mode the one that saw the most images), on its first real-data input path,
        FP32 if it is trained (its weights are FP32 either way). A sweep of synthetic data only takes
        the long test's run where there is one: it trained on the images that are scored."""
        t = self.train
        precision = "fp32" if "fp32" in t["precisions"] else t["precisions"][0]
        system = t["systems"][0]
        paths = sorted(self.sweep.run_inputs(system, "pytorch"), key=lambda i: i == "synthetic")
        if (paths[0] == "synthetic" or not self.embedded) and self.long_test_gpus:
            return self.sweep.long_test_run_dir(system, "pytorch", precision, max(self.long_test_gpus))
        # Otherwise synthetic weights are still quantized: the verdict table says their accuracy means
        # nothing (no better than guessing). A point left out, or waiting for its nodes, has trained
        # nothing yet: the largest that has, so that the stage and the verdict do not wait; the next
        # workflow that finds the waiting one run takes its weights, and the stage runs again.
        waits = Waiting(self.sweep)

        def usable(gpus):
            run_dir = self.sweep.run_dir(system, "pytorch", precision, gpus, paths[0])
            point = {"system": system, "gpus": gpus, "run_dir": run_dir}
            return not self.sweep.skipped(system, gpus) and not waits.held(point, run_files(point))

        return self.sweep.run_dir(
            system, "pytorch", precision, max(filter(usable, t["gpus"]), default=max(t["gpus"])), paths[0]
        )

    def weights_waiting(self):
        """[{system, gpus, why}] of the run the 'pipeline' weights come from, where it still waits for
        its nodes (plan/waiting.py: on a real dataset, a long test whose nodes are down); else []."""
        if self.infer["models"].get("resnet50") != "pipeline" or self.pipeline_missing():
            return []
        run_dir = self.pipeline_run()
        points = [p for p in self.sweep.sweep() + self.sweep.long_test() if p["run_dir"] == run_dir]
        return Waiting(self.sweep).waiting((points[:1], run_files))

    def check(self):
        """A model without weights, or a table naming a model that is not evaluated, is a ConfigProblem.
        A 'pipeline' model this plan trains no weights for is left out of the stage (of config too),
        rather than a plan that fails to parse: the rest of the study runs. Returns a line for each
        left out."""
        models, said = self.infer["models"], []
        for name, source in list(models.items()):
            key = f"inference.models.{name}"
            if source == "pipeline":
                if name != "resnet50":
                    raise ConfigProblem(
                        f"config {key} = pipeline: the training stage trains ResNet-50 only; give {name} "
                        f"'torchvision' or a weights file"
                    )
                missing = self.pipeline_missing()
                if missing:
                    said.append(f"dlscale: {key} = pipeline left out of the INT8 stage: {missing}")
                    del models[name]
                    self.throughput["models"] = [m for m in self.throughput["models"] if m != name]
            elif source != "torchvision":
                config_checks.check_path(key, source, file_pattern=True)
                if not self.is_file(source):
                    raise ConfigProblem(
                        f"config {key} = {source!r}: no such weights file (or use 'torchvision', or 'pipeline' "
                        f"for resnet50)"
                    )
        for name in self.throughput["models"]:
            if name not in models:
                raise ConfigProblem(
                    f"config inference.throughput.models names {name}, which is not in inference.models"
                )
        largest = max(self.batch_sizes() + [self.infer["batch_size"]])
        if self.tensorrt and largest > self.infer["tensorrt"]["max_batch"]:
            raise ConfigProblem(
                f"config inference.tensorrt.max_batch = {self.infer['tensorrt']['max_batch']} is below batch "
                f"{largest} (inference.throughput.batch_sizes / inference.batch_size)"
            )
        return said

    def system(self):
        """The system (under systems:) whose nodes build, score and time the engines: inference.system,
        or the first of training.systems. One name for all of them, so that a cluster gives every
        inference job the same kind of node."""
        name = self.infer["system"] or self.train["systems"][0]
        if name not in self.config["systems"]:
            raise ConfigProblem(
                f"config inference.system = {name!r} is not defined under config systems (defined: "
                f'{", ".join(self.config["systems"])}): name one of them, or leave it "" for the first of '
                f"training.systems"
            )
        return name

    def export_weights(self, w):
        """What the export of a model reads: the pipeline run's summary, torchvision's fetch record,
        or the configured weights file."""
        source = self.infer["models"][w.model]
        if source == "pipeline":
            return f"{self.pipeline_run()}/summary.json"
        return f"{self.config['data_dir']}/weights/{w.model}.torchvision.json" if source == "torchvision" else source

    def export_args(self, w, input):
        source = self.infer["models"][w.model]
        if source == "pipeline":
            return ["--source", "pipeline", "--weights", f"{os.path.dirname(input.weights)}/weights.pt"]
        if source == "torchvision":
            return ["--source", "torchvision", "--torch-home", self.torch_home]
        return ["--source", "file", "--weights", source]

    def calibration_args(self):
        """Only what the chosen method uses, so editing another method's setting reruns nothing."""
        method = self.calib["method"]
        keys = ["method", "chunk_batches"] + (["histogram_bins"] if method in ("entropy", "percentile") else [])
        keys += ["percentile"] if method == "percentile" else []
        return config_schema.argv(self.calib, "inference.calibration", keys)

    def engine_args(self):
        if not self.tensorrt:
            return []
        return config_schema.argv(self.infer["tensorrt"], "inference.tensorrt", build_engine.BUILD)

    def resources(self, measuring=False):
        """What an engine build, evaluation or timed job asks SLURM for: inference.system's partition,
        account, constraint and qos, and with TensorRT one GPU of its gpu_type, requested as the system
        requests GPUs (a system without a gpu_request: one GPU of any type). A measuring job of TensorRT
        (the timed runs) also takes its node alone (exclusive_flags), as training runs do; ONNX Runtime's
        are CPU figures that back no verdict, so they neither hold a GPU nor take a GPU node alone. Run
        locally, none of this applies. The engine's resources are functions of a job's wildcards."""
        system = self.system()
        request = self.config["systems"][system]["gpu_request"]
        cpu = self.cpu_jobs if not self.tensorrt else {}  # ONNX Runtime: a CPU job, on cpu_jobs' partition where set
        # TensorRT's timing job: minutes from its estimate, not the profile's default runtime of hours
        runtime = cpu.get("runtime") or (self.timing_minutes() if measuring else None)
        return dict(
            cpus_per_task=self.infer["threads"],
            slurm_partition=cpu.get("slurm_partition") or self.shape.resource(system, "partition"),
            **({"runtime": runtime} if runtime else {}),
            slurm_account=self.shape.resource(system, "account"),
            constraint=self.shape.resource(system, "constraint"),
            qos=self.shape.resource(system, "qos"),
            # the plugin takes gres only as its own resource, never in slurm_extra
            gres=lambda w: self.gres(self.engine_of(w), system, request),
            gpu=lambda w: 1 if self.engine_of(w) == "tensorrt" and request == "none" else None,
            slurm_extra=lambda w: self.slurm_extra(self.engine_of(w), system, request, measuring),
        )

    def engine_of(self, w):
        """The engine a job runs: its wildcard, else (a job of the stage's engine alone) the config's."""
        return getattr(w, "engine", None) or self.engine

    def engine_checks(self, route):
        """The files the engine builds wait for: with TensorRT on a container route, whose python the
        parse-time check cannot start (its runtime is on the nodes), the report of a job that asked
        it on a node of inference.system (int8_engine_check); nothing otherwise."""
        if not self.tensorrt or isinstance(route, str):
            return []
        return [f"{self.config['results_dir']}/preflight/int8/{self.system()}.engine.json"]

    def timing_minutes(self):
        """The TensorRT timing job's time limit: every network and batch size of Fig. 9 times each
        precision for at least duration_s after two blocks' warm-up of warmup_ms; timing_margin times
        that (deserializing each pair's engines, runs slower than the least), plus timing_start_min.
        None for ONNX Runtime, whose runs go by count at a speed no setting tells."""
        if not self.tensorrt:
            return None
        trt = self.infer["tensorrt"]
        per_precision = trt["duration_s"] + 2 * trt["warmup_ms"] / 1000
        timed_s = len(self.throughput["models"]) * len(self.batch_sizes()) * 2 * per_precision
        return math.ceil(timed_s * trt["timing_margin"] / 60) + trt["timing_start_min"]

    def check_resources(self):
        """The engine check's: an engine job's node and GPU, for the minutes an import takes."""
        return {**self.resources(), "runtime": CHECK_MIN}

    def gres(self, engine, system, request):
        return f"gpu:{self.shape.gpus_of_node(system, 1)}" if engine == "tensorrt" and request == "gres" else None

    def slurm_extra(self, engine, system, request, measuring):
        tensorrt = engine == "tensorrt"
        words = self.shape.exclusive_flags(system) if measuring and tensorrt else []
        if tensorrt and request == "gpus-per-node":
            words.append(self.shape.gpu_flag(system, 1))
        return shlex.join(words) if words else None

    def engine_threads(self, threads, local):
        """inference.threads, capped at the cores a local run gave the job."""
        return min(self.infer["threads"], threads) if local else self.infer["threads"]

    def timing_pairs(self):
        """The timing job's --pair words: each network of Fig. 9, its two engine files and the folder
        of its records, as the rule's inputs and outputs name them."""
        words = []
        for model in self.throughput["models"]:
            folder = f"{self.config['results_dir']}/int8/{model}/{self.engine}"
            words += ["--pair", model, f"{folder}/fp32.engine", f"{folder}/int8.engine", f"{folder}/throughput"]
        return words

    def durations(self, w):
        """TensorRT's timed runs by duration too (trtexec's warm-up and duration); ONNX Runtime's by count."""
        if self.engine_of(w) != "tensorrt":
            return []
        trt = self.infer["tensorrt"]
        return [f"--warmup-s={trt['warmup_ms'] / 1000}", f"--duration-s={trt['duration_s']}"]
